/* lora.c: the LoRA side path of a group of projections that read one input: the shapes and semantics of
 * the backend's lora_fwd / lora_bwd (backend/backend.h), in float32 over a given product (the reference
 * passes the double-accumulating qlt_cpu_gemm, the default mode OpenBLAS's). Sites share r and scale;
 * site i's u and du are columns i*r.. of [N, k*r]. */
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"

void qlt_cpu_lora_fwd_with(qlt_cpu_gemm_fn gemm, const qlt_lora_site *sites, int k, float *u, const float *x, int64_t n,
                           int64_t in, int r, float scale) {
    int64_t ku = (int64_t)k * r;
    for (int i = 0; i < k; i++) {
        const qlt_lora_site *s = &sites[i];
        gemm(0, 1, n, r, in, 1.0f, x, in, s->a, in, 0.0f, u + (int64_t)i * r, ku);                /* u_i */
        gemm(0, 1, n, s->out, r, scale, u + (int64_t)i * r, ku, s->b, r, 1.0f, s->y, s->ld);       /* y_i += */
    }
}

void qlt_cpu_lora_bwd_with(qlt_cpu_gemm_fn gemm, const qlt_lora_site *sites, int k, float *du, const float *u,
                           const float *x, float *dx, float dx_beta, int64_t n, int64_t in, int r, float scale) {
    int64_t ku = (int64_t)k * r;
    for (int i = 0; i < k; i++) {
        const qlt_lora_site *s = &sites[i];
        const float *dy = s->dy;
        float *dui = du + (int64_t)i * r;
        gemm(0, 0, n, r, s->out, scale, dy, s->ld, s->b, r, 0.0f, dui, ku);              /* du_i = s dy B */
        gemm(1, 0, s->out, r, n, scale, dy, s->ld, u + (int64_t)i * r, ku, 1.0f, s->db, r); /* dB += s dy^T u */
        gemm(1, 0, r, in, n, 1.0f, dui, ku, x, in, 1.0f, s->da, in);                     /* dA += du^T x */
        if (dx) gemm(0, 0, n, in, r, 1.0f, dui, ku, s->a, in, i == 0 ? dx_beta : 1.0f, dx, in); /* dx += du A */
    }
}

void qlt_cpu_lora_fwd(const qlt_lora_site *sites, int k, float *u, const float *x, int64_t n, int64_t in, int r,
                      float scale) {
    qlt_cpu_lora_fwd_with(qlt_cpu_gemm, sites, k, u, x, n, in, r, scale);
}

void qlt_cpu_lora_bwd(const qlt_lora_site *sites, int k, float *du, const float *u, const float *x, float *dx,
                      float dx_beta, int64_t n, int64_t in, int r, float scale) {
    qlt_cpu_lora_bwd_with(qlt_cpu_gemm, sites, k, du, u, x, dx, dx_beta, n, in, r, scale);
}
