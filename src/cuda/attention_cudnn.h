/* attention_cudnn.h: the C face of attention_cudnn.cpp, causal grouped-query attention through cuDNN's fused
 * flash-attention (SDPA) graphs. cuDNN is loaded at run time (dlopen of libcudnn.so.9); where it is absent or
 * rejects a shape, every call answers 0 and the caller runs its own kernels. Built only when the build found
 * cuDNN's headers and cudnn-frontend (QLT_HAVE_CUDNN). */
#ifndef QLT_CUDA_ATTENTION_CUDNN_H
#define QLT_CUDA_ATTENTION_CUDNN_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qlt_cudnn_attn qlt_cudnn_attn;

/* NULL (and nothing printed) when cuDNN is not built in or cannot be loaded. A workspace larger than the
 * caller's scratch comes from alloc(ctx, bytes) (the backend's tracked allocations, freed with the backend). */
qlt_cudnn_attn *qlt_cudnn_attn_create(cudaStream_t stream, void *(*alloc)(void *ctx, size_t bytes), void *ctx);
void qlt_cudnn_attn_destroy(qlt_cudnn_attn *a);
/* cuDNN's version as 91900 for 9.19.0; 0 for NULL */
int qlt_cudnn_attn_version(const qlt_cudnn_attn *a);

/* One attention call's shape. slots 0: dense, every row one sequence (the batch has no packed-example
 * boundaries that matter), lse laid out [batch, n_heads, seq]; slots K (1..32): ragged, each row's examples
 * (from seg_start) as up to K sequences, lse [batch*seq, n_heads] as the own kernels keep it.
 * deterministic: the backward without atomics (bitwise reproducible). */
typedef struct qlt_cudnn_attn_shape {
    int batch, seq, n_heads, n_kv, hd, slots, deterministic;
    float scale;
} qlt_cudnn_attn_shape;

/* 1 when fwd / bwd below run this shape (builds both plans the first time; a shape runs both directions
 * through cuDNN or neither) */
int qlt_cudnn_attn_usable(qlt_cudnn_attn *a, const qlt_cudnn_attn_shape *sh);

/* Causal attention. q / out [batch*seq, n_heads*hd], k / v [batch*seq, n_kv*hd] bf16; lse float as the shape
 * says (natural log-sum-exp of the scaled scores); seg_start [batch, seq] (read by ragged shapes only).
 * 1: enqueued on the stream; 0: not supported here (nothing enqueued). */
int qlt_cudnn_attn_fwd(qlt_cudnn_attn *a, const qlt_cudnn_attn_shape *sh, void *out, float *lse, const void *q,
                       const void *k, const void *v, const int32_t *seg_start);
/* dq / dk / dv overwritten (GQA's dK / dV summed over each group in fp32 inside cuDNN). scratch: the caller's
 * scratch_bytes of device memory, used as cuDNN's workspace when large enough (else one of its own). */
int qlt_cudnn_attn_bwd(qlt_cudnn_attn *a, const qlt_cudnn_attn_shape *sh, void *dq, void *dk, void *dv,
                       void *scratch, size_t scratch_bytes, const void *dout, const void *out, const float *lse,
                       const void *q, const void *k, const void *v, const int32_t *seg_start);

#ifdef __cplusplus
}
#endif

#endif
