/* attention_bwd_fused.h: the one-pass attention backward (attention_bwd_fused.cu), called by the attention
 * launcher in attention.cu for the head dims it supports. Included only from .cu files (C++). */
#ifndef QLT_CUDA_ATTENTION_BWD_FUSED_H
#define QLT_CUDA_ATTENTION_BWD_FUSED_H

#include "cuda/cuda_common.h"

/* head_dim 64 and 128, where the device's shared memory holds the kernel's tiles (173 KiB at 128: Hopper; 110 KiB at
 * 64: Hopper and A100, not Ada) */
bool qlt_attn_bwd_fused_supported(int head_dim, qlt_backend *be);

/* bytes of the fp32 dQ accumulator [n, n_heads, head_dim] */
size_t qlt_attn_bwd_fused_acc_bytes(int64_t n, int n_heads, int head_dim);

/* dq [B*S, n_heads*hd] bf16 (overwritten) through dq_acc (fp32, same shape, zeroed here); with n_heads ==
 * n_kv dk / dv [B*S, n_kv*hd] bf16 are written, else the bf16 per-query-head partials pdk / pdv
 * [B*S, n_heads, hd] (the caller sums each group). dsum [B*S, n_heads] = rowsum(dO * O), already computed. */
void qlt_attn_bwd_fused(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, float *dq_acc, bf16 *pdk, bf16 *pdv,
                        const float *dsum, const bf16 *dout, const float *lse, const bf16 *q, const bf16 *k,
                        const bf16 *v, const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv,
                        int head_dim, float scale);

#endif
