/* swiglu.c: the SwiGLU gate h = silu(gate) * up and its backward (reference and default mode), reading gate
 * and up side by side in one [N, 2I] row as the stacked gate+up linear writes them. */
#include <math.h>

#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"

void qlt_cpu_swiglu_fwd(float *h, const float *gu, int64_t n, int64_t inter) {
    for (int64_t t = 0; t < n; t++) {
        const float *gate = gu + t * 2 * inter, *up = gate + inter;
        for (int64_t j = 0; j < inter; j++) {
            double g = gate[j], sig = 1.0 / (1.0 + exp(-g));
            h[t * inter + j] = (float)(g * sig * up[j]);
        }
    }
}

/* d silu(g)/dg = sig (1 + g (1 - sig)); each element's inputs are read before its outputs are written,
 * so dgu may be gu */
void qlt_cpu_swiglu_bwd(float *dgu, const float *dh, const float *gu, int64_t n, int64_t inter) {
    for (int64_t t = 0; t < n; t++) {
        const float *gate = gu + t * 2 * inter, *up = gate + inter;
        float *dgate = dgu + t * 2 * inter, *dup = dgate + inter;
        for (int64_t j = 0; j < inter; j++) {
            double g = gate[j], u = up[j], d = dh[t * inter + j], sig = 1.0 / (1.0 + exp(-g));
            dup[j] = (float)(d * g * sig);
            dgate[j] = (float)(d * u * sig * (1.0 + g * (1.0 - sig)));
        }
    }
}

/* The default mode's: float32 with qlt_cpu_expf, rows across threads. */
QLT_CPU_VECTOR
void qlt_cpu_swiglu_fwd_fast(float *h, const float *gu, int64_t n, int64_t inter) {
#pragma omp parallel for schedule(static) if (n * inter > 65536)
    for (int64_t t = 0; t < n; t++) {
        const float *gate = gu + t * 2 * inter, *up = gate + inter;
        float *ht = h + t * inter;
#pragma omp simd
        for (int64_t j = 0; j < inter; j++) {
            float g = gate[j];
            ht[j] = g / (1.0f + qlt_cpu_expf(-g)) * up[j];
        }
    }
}

QLT_CPU_VECTOR
void qlt_cpu_swiglu_bwd_fast(float *dgu, const float *dh, const float *gu, int64_t n, int64_t inter) {
#pragma omp parallel for schedule(static) if (n * inter > 65536)
    for (int64_t t = 0; t < n; t++) {
        const float *gate = gu + t * 2 * inter, *up = gate + inter, *dht = dh + t * inter;
        float *dgate = dgu + t * 2 * inter, *dup = dgate + inter;
#pragma omp simd
        for (int64_t j = 0; j < inter; j++) {
            float g = gate[j], u = up[j], d = dht[j], sig = 1.0f / (1.0f + qlt_cpu_expf(-g));
            dup[j] = d * g * sig;
            dgate[j] = d * u * sig * (1.0f + g * (1.0f - sig));
        }
    }
}
