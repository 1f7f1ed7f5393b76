/* lora.c: the LoRA side path of a group of projections that read one input: the shapes and semantics of
 * the backend's lora_fwd / lora_bwd (backend/backend.h). Sites share r and scale; site i's u and du are
 * columns i*r.. of [N, k*r]. The reference runs each site's products with the double-accumulating
 * qlt_cpu_gemm; the default mode lays the sites' A side by side in a workspace so that x.A^T, du^T.x and
 * du.A are one OpenBLAS product each for the whole group. */
#include <string.h>

#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"

static void fwd_sites(qlt_cpu_gemm_fn gemm, const qlt_lora_site *sites, int k, float *u, const float *x, int64_t n,
                      int64_t in, int r, float scale) {
    int64_t ku = (int64_t)k * r;
    for (int i = 0; i < k; i++) {
        const qlt_lora_site *s = &sites[i];
        gemm(0, 1, n, r, in, 1.0f, x, in, s->a, in, 0.0f, u + (int64_t)i * r, ku);                /* u_i */
        gemm(0, 1, n, s->out, r, scale, u + (int64_t)i * r, ku, s->b, r, 1.0f, s->y, s->ld);       /* y_i += */
    }
}

static void bwd_sites(qlt_cpu_gemm_fn gemm, const qlt_lora_site *sites, int k, float *du, const float *u,
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
    fwd_sites(qlt_cpu_gemm, sites, k, u, x, n, in, r, scale);
}

void qlt_cpu_lora_bwd(const qlt_lora_site *sites, int k, float *du, const float *u, const float *x, float *dx,
                      float dx_beta, int64_t n, int64_t in, int r, float scale) {
    bwd_sites(qlt_cpu_gemm, sites, k, du, u, x, dx, dx_beta, n, in, r, scale);
}

/* a_cat [k*r, in] = the sites' A one under the other */
static void stack_a(float *a_cat, const qlt_lora_site *sites, int k, int64_t in, int r) {
    for (int i = 0; i < k; i++) memcpy(a_cat + (int64_t)i * r * in, sites[i].a, sizeof(float) * (size_t)(r * in));
}

void qlt_cpu_lora_fwd_fast(const qlt_lora_site *sites, int k, float *u, const float *x, int64_t n, int64_t in, int r,
                           float scale, float *work, int64_t work_floats) {
    const int64_t ku = (int64_t)k * r;
    if (work_floats < ku * in) {
        fwd_sites(qlt_cpu_sgemm, sites, k, u, x, n, in, r, scale);
        return;
    }
    stack_a(work, sites, k, in, r);
    qlt_cpu_sgemm(0, 1, n, ku, in, 1.0f, x, in, work, in, 0.0f, u, ku); /* u = x . A_cat^T */
    for (int i = 0; i < k; i++) {
        const qlt_lora_site *s = &sites[i];
        qlt_cpu_sgemm(0, 1, n, s->out, r, scale, u + (int64_t)i * r, ku, s->b, r, 1.0f, s->y, s->ld); /* y_i += */
    }
}

void qlt_cpu_lora_bwd_fast(const qlt_lora_site *sites, int k, float *du, const float *u, const float *x, float *dx,
                           float dx_beta, int64_t n, int64_t in, int r, float scale, float *work, int64_t work_floats) {
    const int64_t ku = (int64_t)k * r;
    if (work_floats < 2 * ku * in) {
        bwd_sites(qlt_cpu_sgemm, sites, k, du, u, x, dx, dx_beta, n, in, r, scale);
        return;
    }
    for (int i = 0; i < k; i++) {
        const qlt_lora_site *s = &sites[i];
        qlt_cpu_sgemm(0, 0, n, r, s->out, scale, s->dy, s->ld, s->b, r, 0.0f, du + (int64_t)i * r, ku); /* du_i */
        qlt_cpu_sgemm(1, 0, s->out, r, n, scale, s->dy, s->ld, u + (int64_t)i * r, ku, 1.0f, s->db, r);  /* dB_i += */
    }
    float *a_cat = work, *da_cat = work + ku * in;
    qlt_cpu_sgemm(1, 0, ku, in, n, 1.0f, du, ku, x, in, 0.0f, da_cat, in); /* dA_cat = du^T x */
    for (int i = 0; i < k; i++) qlt_cpu_add(sites[i].da, sites[i].da, da_cat + (int64_t)i * r * in, (int64_t)r * in);
    if (dx) {
        stack_a(a_cat, sites, k, in, r);
        qlt_cpu_sgemm(0, 0, n, in, ku, 1.0f, du, ku, a_cat, in, dx_beta, dx, in); /* dx = beta dx + du . A_cat */
    }
}
