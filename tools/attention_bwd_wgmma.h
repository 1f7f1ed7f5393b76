/* attention_bwd_wgmma.h: the Hopper (wgmma) one-pass attention backward for head_dim 128
 * (attention_bwd_wgmma.cu), a measured variant of src/cuda/attention_bwd_fused.cu's mma.sync kernel kept as a
 * tool (attention_wgmma_probe.cu). Arguments as that kernel's: dq_acc [B*S, n_heads, 128] fp32, zeroed by the
 * caller; dk/dv [B*S, n_kv*128] bf16 without GQA, else the per-head partials pdk/pdv [B*S, n_heads*128]. */
#ifndef QLT_CUDA_ATTENTION_BWD_WGMMA_H
#define QLT_CUDA_ATTENTION_BWD_WGMMA_H

#include "cuda/cuda_common.h"

bool qlt_attn_bwd_wgmma_usable(int head_dim);
void qlt_attn_bwd_wgmma(cudaStream_t s, float *dq_acc, bf16 *dk, bf16 *dv, bf16 *pdk, bf16 *pdv, const float *dsum,
                        const bf16 *dout, const float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                        const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv, float scale);

/* train.deterministic: dK / dV by the same kernel without dQ, then dQ [B*S, n_heads*128] bf16 by a kernel that
 * owns its queries (no atomics: bitwise reproducible) */
void qlt_attn_bwd_wgmma_deterministic(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, bf16 *pdk, bf16 *pdv,
                                      const float *dsum, const bf16 *dout, const float *lse, const bf16 *q,
                                      const bf16 *k, const bf16 *v, const int32_t *seg_start, int batch, int seq,
                                      int n_heads, int n_kv, float scale);

#endif
