/* cpu_ops.h: the float32 reference implementation of every op, plain C (OpenMP across rows where it
 * is free to add), readable, no intrinsics: the CPU backend's reference mode (train.cpu_reference), what the
 * float64 goldens check, and the oracle for the CUDA kernels: the GPU checks call them directly on the same
 * inputs. The default mode's faster ops are in cpu_fast.h. Shapes are in the comments; all buffers are
 * float32 host memory; matrices are row-major. Semantics are those of the matching qlt_backend op
 * (backend.h). */
#ifndef QLT_CPU_OPS_H
#define QLT_CPU_OPS_H

#include <stdint.h>

#include "backend/backend.h"
#include "common/counter_hash.h"

/* C[M,N] = alpha * op(A) . op(B) + beta * C, op(X) = X or X^T (trans_* = 1), with leading dimensions.
 * Dot products accumulate in double. */
void qlt_cpu_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* y [N, D] = x * rstd * w; rstd [N] */
void qlt_cpu_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t d, float eps);
/* dx = beta*dx + J^T dy */
void qlt_cpu_rmsnorm_bwd(float *dx, const float *dy, const float *x, const float *rstd, const float *w,
                         int64_t n, int64_t d, float beta);
/* in place on x [N, heads, head_dim] */
void qlt_cpu_rope(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                  int inverse);
/* the same on the first rotary_dim dims of each head, cos / sin times attn_factor (backend.h: rope_scaled) */
void qlt_cpu_rope_scaled(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                         int rotary_dim, float attn_factor, int inverse);
void qlt_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                           int head_dim, float scale);
void qlt_cpu_attention_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                           int head_dim, float scale);
/* Attention of n new queries against a KV cache (backend.h attention_decode): query i (position past + i)
 * attends keys 0 .. past + i of k / v [past + n, n_kv_heads * head_dim] (with window > 0 only the last window
 * of them: past + i - j < window); sums in double as the forward. */
void qlt_cpu_attention_decode(float *out, const float *q, const float *k, const float *v, int64_t past, int64_t n,
                              int n_heads, int n_kv_heads, int head_dim, float scale, int window);
/* gu [N, 2I] = (gate | up) per row; h [N, I]; dgu may be gu */
void qlt_cpu_swiglu_fwd(float *h, const float *gu, int64_t n, int64_t inter);
void qlt_cpu_swiglu_bwd(float *dgu, const float *dh, const float *gu, int64_t n, int64_t inter);
/* The LoRA group side path (backend.h lora_fwd / lora_bwd); du [N, k*r] is the backward's scratch. */
void qlt_cpu_lora_fwd(const qlt_lora_site *sites, int k, float *u, const float *x, int64_t n, int64_t in, int r,
                      float scale);
void qlt_cpu_lora_bwd(const qlt_lora_site *sites, int k, float *du, const float *u, const float *x, float *dx,
                      float dx_beta, int64_t n, int64_t in, int r, float scale);
/* out = a + b over count elements (out may alias a or b); exact, so both modes use it. */
void qlt_cpu_add(float *out, const float *a, const float *b, int64_t count);
/* Dropout with the keep-mask of common/counter_hash.h (qlt_dropout_keep, qlt_dropout_seed). */
void qlt_cpu_dropout(float *out, const float *x, int64_t count, float p, uint64_t seed);
/* Fused lm_head + cross-entropy; w [V, D]; scratch double [n*V + n] (logit rows, then per-token losses);
 * returns the loss sum (double). dx may be NULL. */
double qlt_cpu_lm_head_loss(float *dx, float *scratch, const float *x, const float *w, const int32_t *targets,
                            int64_t n, int64_t d, int64_t vocab, float grad_scale);
double qlt_cpu_sumsq(const float *g, int64_t count);
/* torch AdamW with the clip scale already computed (clip = 1 means no clipping). */
void qlt_cpu_adamw(float *p, const float *g, float *m, float *v, int64_t count, float lr, float beta1, float beta2,
                   float eps, float weight_decay, float bias_correction1, float bias_correction2, float clip);
/* clip scale of torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 */
float qlt_clip_scale(float grad_norm_sq, float max_norm);

#endif
