/* gemm_rate.c: what `qlora-train bench` compares the CPU backend's products with: OpenBLAS's sgemm alone on
 * a large square product (the MFU denominator) and on the very shapes the frozen-weight linear ops ran while
 * profiling (each shape timed on fresh buffers, times its number of calls), so the report says which share
 * of the library's own speed the linear ops (NF4 dequantization included) keep. */
#include <omp.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/error.h"
#include "cpu/backend_cpu.h"
#include "cpu/backend_cpu_internal.h"

void qlt_cpu_record_gemm(qlt_cpu_impl *impl, int trans_b, int64_t m, int64_t n, int64_t k) {
    if (!impl->profiling) return;
    for (int i = 0; i < impl->n_shapes; i++) {
        qlt_cpu_gemm_shape *s = &impl->shapes[i];
        if (s->trans_b == trans_b && s->m == m && s->n == n && s->k == k) {
            s->calls++;
            return;
        }
    }
    if (impl->n_shapes < QLT_CPU_GEMM_SHAPES)
        impl->shapes[impl->n_shapes++] = (qlt_cpu_gemm_shape){trans_b, m, n, k, 1};
    else
        impl->shapes_dropped++;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median milliseconds of `reps` products C [m, n] = A [m, k] . op(B) (B [n, k] when trans_b, else [k, n]) on
 * buffers of values in [-1, 1), after one untimed product. */
static double sgemm_ms(int trans_b, int64_t m, int64_t n, int64_t k, int reps) {
    float *a = qlt_xmalloc(sizeof(float) * (size_t)(m * k)), *b = qlt_xmalloc(sizeof(float) * (size_t)(n * k));
    float *c = qlt_xmalloc(sizeof(float) * (size_t)(m * n));
    uint32_t x = 12345;
    for (int64_t i = 0; i < m * k; i++) a[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
    for (int64_t i = 0; i < n * k; i++) b[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
    double *t = qlt_xmalloc(sizeof(double) * (size_t)reps);
    for (int r = -1; r < reps; r++) {
        double t0 = qlt_now_seconds();
        qlt_cpu_sgemm(0, trans_b, m, n, k, 1.0f, a, k, b, trans_b ? k : n, 0.0f, c, n);
        if (r >= 0) t[r] = 1e3 * (qlt_now_seconds() - t0);
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    double ms = t[reps / 2];
    free(t);
    free(a);
    free(b);
    free(c);
    return ms;
}

double qlt_cpu_gemm_peak_tflops(qlt_backend *be) {
    const int64_t n = 1536;
    return 2.0 * (double)n * n * n / (sgemm_ms(1, n, n, n, 5) * 1e-3) / 1e12;
}

int qlt_backend_cpu_gemm_report(qlt_backend *be, qlt_cpu_gemm_report *out) {
    qlt_cpu_impl *impl = be->impl;
    *out = (qlt_cpu_gemm_report){0};
    if (impl->shapes_dropped)
        return qlt_fail("the CPU backend saw more than %d product shapes while profiling: none are compared",
                        QLT_CPU_GEMM_SHAPES);
    for (int i = 0; i < impl->n_shapes; i++) {
        const qlt_cpu_gemm_shape *s = &impl->shapes[i];
        out->flops += 2.0 * (double)s->m * (double)s->n * (double)s->k * (double)s->calls;
        out->sgemm_ms += sgemm_ms(s->trans_b, s->m, s->n, s->k, 5) * (double)s->calls;
        out->calls += s->calls;
    }
    out->shapes = impl->n_shapes;
    out->threads = omp_get_max_threads();
    return 0;
}
