/* cpu_fast.h: the CPU backend's default-mode ops: float32 throughout, matrix products through OpenBLAS's
 * sgemm, elementwise loops written so the compiler vectorizes them (one clone for x86-64-v3 = AVX2 + FMA
 * picked at run time, one for any x86-64). Same shapes and semantics as the reference ops of cpu_ops.h
 * (and as the backend.h ops they serve); only the rounding differs. The reference mode
 * (train.cpu_reference) runs cpu_ops.h instead. All buffers are float32 host memory, matrices row-major. */
#ifndef QLT_CPU_FAST_H
#define QLT_CPU_FAST_H

#include <stdint.h>
#include <string.h>

#include "backend/backend.h"

/* A function compiled twice, for AVX2 + FMA and for the baseline, the better one chosen when the program
 * starts (GCC's function multiversioning); the binary stays portable to any x86-64. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define QLT_CPU_VECTOR __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define QLT_CPU_VECTOR
#endif

/* C[M,N] = alpha * op(A) . op(B) + beta * C with OpenBLAS's sgemm; arguments as qlt_cpu_gemm. */
void qlt_cpu_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* A product with qlt_cpu_gemm's arguments: the reference or OpenBLAS's. */
typedef void (*qlt_cpu_gemm_fn)(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                int64_t ldc);

/* e^x in float32 without a call, so loops over it vectorize: Cody-Waite reduction by ln 2 and cephes'
 * polynomial; relative error a few 1e-7 (tests/unit/test_cpu_fast.c); 0 below -87.3 (no subnormal results),
 * +inf above 88.3 (a little early: e^88.72 is the largest float), NaN stays NaN. */
static inline float qlt_cpu_expf(float x) {
    const float hi = 88.3f, lo = -87.3f;
    float xc = x < hi ? x : hi; /* NaN -> hi: every step below stays finite, the result is picked at the end */
    xc = xc > lo ? xc : lo;
    float kf = xc * 1.44269504088896341f;
    kf = (kf + 12582912.0f) - 12582912.0f; /* round to nearest integer (|kf| < 2^22) */
    float r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)kf + 127) << 23; /* 2^kf, kf in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float e = p * scale;
    e = x < lo ? 0.0f : e;
    e = x > hi ? __builtin_inff() : e;
    return x != x ? x : e;
}

/* The ops (cpu_ops.h has each one's shapes and semantics). */
void qlt_cpu_rmsnorm_fwd_fast(float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t d, float eps);
void qlt_cpu_rmsnorm_bwd_fast(float *dx, const float *dy, const float *x, const float *rstd, const float *w,
                              int64_t n, int64_t d, float beta);
void qlt_cpu_rope_fast(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                       int inverse);
void qlt_cpu_rope_scaled_fast(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                              int rotary_dim, float attn_factor, int inverse);
void qlt_cpu_swiglu_fwd_fast(float *h, const float *gu, int64_t n, int64_t inter);
void qlt_cpu_swiglu_bwd_fast(float *dgu, const float *dh, const float *gu, int64_t n, int64_t inter);
/* Attention by blocks of queries: scores, probabilities and their gradients of a block are products of
 * OpenBLAS (one block at a time on each thread); no [seq, seq] matrix is held. */
void qlt_cpu_attention_fwd_fast(float *out, float *lse, const float *q, const float *k, const float *v,
                                const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                int head_dim, float scale);
void qlt_cpu_attention_bwd_fast(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *out,
                                const float *lse, const float *q, const float *k, const float *v,
                                const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                int head_dim, float scale);
/* The LoRA group side path (cpu_ops.h's qlt_cpu_lora_fwd / _bwd) with a workspace of work_floats floats:
 * with room for k*r*in (forward) or 2*k*r*in (backward), the sites' A are laid side by side there so that
 * x.A^T, du^T.x and du.A are one product each for the group; with less, the products run site by site. */
void qlt_cpu_lora_fwd_fast(const qlt_lora_site *sites, int k, float *u, const float *x, int64_t n, int64_t in, int r,
                           float scale, float *work, int64_t work_floats);
void qlt_cpu_lora_bwd_fast(const qlt_lora_site *sites, int k, float *du, const float *u, const float *x, float *dx,
                           float dx_beta, int64_t n, int64_t in, int r, float scale, float *work, int64_t work_floats);
/* Fused lm_head + cross-entropy in chunks of QLT_CPU_LOSS_CHUNK_FAST tokens: the chunk's logits in float32
 * (one sgemm), softmax and loss per row, the gradient rows written over the logits, dx = G . W (one sgemm).
 * scratch: qlt_cpu_lm_head_loss_fast_scratch(n, vocab) bytes. Returns the loss sum (fixed order, double). */
#define QLT_CPU_LOSS_CHUNK_FAST 256
double qlt_cpu_lm_head_loss_fast(float *dx, void *scratch, const float *x, const float *w, const int32_t *targets,
                                 int64_t n, int64_t d, int64_t vocab, float grad_scale);
size_t qlt_cpu_lm_head_loss_fast_scratch(int64_t n, int64_t vocab);

#endif
