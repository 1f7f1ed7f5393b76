/* gemma_ops.h: the CPU ops Gemma 2 / 3 add (GeGLU with tanh-approximated GELU, soft-capped attention scores and
 * logits, a scaled copy of the embeddings), reference and default mode, kept out of cpu_ops.h / cpu_fast.h so the
 * families' ops stay apart. Shapes and semantics are those of the backend.h entries they serve (geglu_fwd ...). */
#ifndef QLT_CPU_GEMMA_OPS_H
#define QLT_CPU_GEMMA_OPS_H

#include <stdint.h>

#include "backend/backend.h"
#include "cpu/cpu_fast.h"

/* tanh through qlt_cpu_expf, so loops over it vectorize: 1 - 2 / (e^2x + 1); exact limits +-1, absolute
 * error a few 1e-7 (tests/unit/test_gemma_ops.c). */
static inline float qlt_cpu_tanhf(float x) { return 1.0f - 2.0f / (qlt_cpu_expf(2.0f * x) + 1.0f); }

/* gu [N, 2I] = (gate | up) per row; h [N, I] = gelu_tanh(gate) * up; dgu may be gu (the gradient replaces it). */
void qlt_cpu_geglu_fwd(float *h, const float *gu, int64_t n, int64_t inter);
void qlt_cpu_geglu_bwd(float *dgu, const float *dh, const float *gu, int64_t n, int64_t inter);
void qlt_cpu_geglu_fwd_fast(float *h, const float *gu, int64_t n, int64_t inter);
void qlt_cpu_geglu_bwd_fast(float *dgu, const float *dh, const float *gu, int64_t n, int64_t inter);

/* Attention (cpu_ops.h's qlt_cpu_attention_fwd / _bwd and their _fast) with the scaled scores soft-capped:
 * s -> softcap tanh(s / softcap); softcap 0 is the plain attention, bit for bit (attention.c). */
void qlt_cpu_attention_softcap_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                                   const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                   int head_dim, float scale, float softcap);
void qlt_cpu_attention_softcap_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                                   const float *out, const float *lse, const float *q, const float *k, const float *v,
                                   const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                   int head_dim, float scale, float softcap);
void qlt_cpu_attention_softcap_fwd_fast(float *out, float *lse, const float *q, const float *k, const float *v,
                                        const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                        int head_dim, float scale, float softcap);
void qlt_cpu_attention_softcap_bwd_fast(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                                        const float *out, const float *lse, const float *q, const float *k,
                                        const float *v, const int32_t *seg_start, int batch, int seq, int n_heads,
                                        int n_kv_heads, int head_dim, float scale, float softcap);

/* Attention over a KV cache (cpu_ops.h's qlt_cpu_attention_decode) with soft-capped scores (attention_decode.c). */
void qlt_cpu_attention_decode_softcap(float *out, const float *q, const float *k, const float *v, int64_t past,
                                      int64_t n, int n_heads, int n_kv_heads, int head_dim, float scale, int window,
                                      float softcap);

/* The fused lm_head + cross-entropy (cpu_ops.h / cpu_fast.h) with the logits soft-capped; softcap 0: plain
 * (cross_entropy.c). */
double qlt_cpu_lm_head_loss_softcap(float *dx, float *scratch, const float *x, const float *w, const int32_t *targets,
                                    int64_t n, int64_t d, int64_t vocab, float grad_scale, float softcap);
double qlt_cpu_lm_head_loss_softcap_fast(float *dx, void *scratch, const float *x, const float *w,
                                         const int32_t *targets, int64_t n, int64_t d, int64_t vocab, float grad_scale,
                                         float softcap);

/* The backend op lm_head_loss_softcap (linear.c, beside lm_head_loss). */
void qlt_cpu_lm_head_loss_softcap_op(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch,
                                     const void *x, const qlt_weight *w, const int32_t *targets, int64_t n,
                                     float softcap);

/* Fills the Gemma entries of a CPU backend's table (backend_cpu_gemma.c). */
void qlt_cpu_install_gemma_ops(qlt_backend *be);

#endif
