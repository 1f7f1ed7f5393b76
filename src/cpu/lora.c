/* lora.c: the LoRA side path of a group of projections that read one input: the shapes and semantics of
 * the backend's lora_fwd / lora_bwd (backend/backend.h). Sites share r and scale; site i's u and du are
 * columns i*r.. of [N, k*r]. The reference runs each site's products with the double-accumulating
 * qlt_cpu_gemm; the default mode lays the sites' A side by side in a workspace so that x.A^T, du^T.x and
 * du.A are one OpenBLAS product each for the whole group, and runs the group in one parallel region. */
#include <omp.h>
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

/* The default mode runs a group's products in one parallel region (each thread its share of rows or
 * columns, one single-threaded sgemm each, no barrier but where a product reads another's whole result)
 * when x.A^T alone has at least this many multiply-adds; smaller groups on the calling thread. */
#define LORA_PARALLEL_MIN (1 << 18)
#define LORA_SHARE_ALIGN 16

/* This thread's share [lo, hi) of total, in multiples of LORA_SHARE_ALIGN. */
static void share(int64_t total, int64_t *lo, int64_t *hi) {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t units = (total + LORA_SHARE_ALIGN - 1) / LORA_SHARE_ALIGN;
    *lo = units * t / nt * LORA_SHARE_ALIGN;
    *hi = units * (t + 1) / nt * LORA_SHARE_ALIGN;
    if (*hi > total) *hi = total;
    if (*lo > total) *lo = total;
}

void qlt_cpu_lora_fwd_fast(const qlt_lora_site *sites, int k, float *u, const float *x, int64_t n, int64_t in, int r,
                           float scale, float *work, int64_t work_floats) {
    const int64_t ku = (int64_t)k * r;
    if (work_floats < ku * in) {
        fwd_sites(qlt_cpu_sgemm, sites, k, u, x, n, in, r, scale);
        return;
    }
    stack_a(work, sites, k, in, r);
#pragma omp parallel if (n * ku * in >= LORA_PARALLEL_MIN)
    {
        int64_t lo, hi; /* rows of x, u and every y */
        share(n, &lo, &hi);
        if (lo < hi) {
            qlt_cpu_sgemm(0, 1, hi - lo, ku, in, 1.0f, x + lo * in, in, work, in, 0.0f, u + lo * ku, ku); /* u = x A^T */
            for (int i = 0; i < k; i++) {
                const qlt_lora_site *s = &sites[i];
                qlt_cpu_sgemm(0, 1, hi - lo, s->out, r, scale, u + lo * ku + (int64_t)i * r, ku, s->b, r, 1.0f,
                              (float *)s->y + lo * s->ld, s->ld); /* y_i += s u_i B_i^T */
            }
        }
    }
}

void qlt_cpu_lora_bwd_fast(const qlt_lora_site *sites, int k, float *du, const float *u, const float *x, float *dx,
                           float dx_beta, int64_t n, int64_t in, int r, float scale, float *work, int64_t work_floats) {
    const int64_t ku = (int64_t)k * r;
    if (work_floats < 2 * ku * in) {
        bwd_sites(qlt_cpu_sgemm, sites, k, du, u, x, dx, dx_beta, n, in, r, scale);
        return;
    }
    float *a_cat = work, *da_cat = work + ku * in;
    stack_a(a_cat, sites, k, in, r);
#pragma omp parallel if (n * ku * in >= LORA_PARALLEL_MIN)
    {
        int64_t lo, hi; /* rows of dy, du and dx */
        share(n, &lo, &hi);
        for (int i = 0; i < k && lo < hi; i++) /* du_i = s dy_i B_i */
            qlt_cpu_sgemm(0, 0, hi - lo, r, sites[i].out, scale, (const float *)sites[i].dy + lo * sites[i].ld,
                          sites[i].ld, sites[i].b, r, 0.0f, du + lo * ku + (int64_t)i * r, ku);
        if (dx && lo < hi) /* dx = beta dx + du A_cat */
            qlt_cpu_sgemm(0, 0, hi - lo, in, ku, 1.0f, du + lo * ku, ku, a_cat, in, dx_beta, dx + lo * in, in);
        for (int i = 0; i < k; i++) { /* dB_i += s dy_i^T u_i, by rows of dB_i (reads all of u: an input) */
            const qlt_lora_site *s = &sites[i];
            int64_t olo, ohi;
            share(s->out, &olo, &ohi);
            if (olo < ohi)
                qlt_cpu_sgemm(1, 0, ohi - olo, r, n, scale, (const float *)s->dy + olo, s->ld, u + (int64_t)i * r, ku,
                              1.0f, s->db + olo * r, r);
        }
#pragma omp barrier /* dA reads every row of du */
        int64_t clo, chi; /* columns of dA */
        share(in, &clo, &chi);
        if (clo < chi) {
            qlt_cpu_sgemm(1, 0, ku, chi - clo, n, 1.0f, du, ku, x + clo, in, 0.0f, da_cat + clo, in); /* du^T x */
            for (int i = 0; i < k; i++)
                for (int64_t j = 0; j < r; j++) {
                    float *da = sites[i].da + j * in;
                    const float *src = da_cat + ((int64_t)i * r + j) * in;
                    for (int64_t c = clo; c < chi; c++) da[c] += src[c];
                }
        }
    }
}
