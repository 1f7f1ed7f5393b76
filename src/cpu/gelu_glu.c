/* gelu_glu.c: Gemma's GeGLU h = gelu_tanh(gate) * up and its backward (reference and default mode), reading gate
 * and up side by side in one [N, 2I] row as the stacked gate+up linear writes them (as swiglu.c does).
 * gelu_tanh(x) = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3): torch's gelu(approximate="tanh"), what
 * transformers' gelu_pytorch_tanh calls; d/dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
#include <math.h>

#include "cpu/gemma_ops.h"

#define GELU_BETA 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_KAPPA 0.044715

void qlt_cpu_geglu_fwd(float *h, const float *gu, int64_t n, int64_t inter) {
#pragma omp parallel for schedule(static) if (n * inter > 65536)
    for (int64_t t = 0; t < n; t++) {
        const float *gate = gu + t * 2 * inter, *up = gate + inter;
        for (int64_t j = 0; j < inter; j++) {
            double x = gate[j], th = tanh(GELU_BETA * (x + GELU_KAPPA * x * x * x));
            h[t * inter + j] = (float)(0.5 * x * (1.0 + th) * up[j]);
        }
    }
}

/* each element's inputs are read before its outputs are written, so dgu may be gu */
void qlt_cpu_geglu_bwd(float *dgu, const float *dh, const float *gu, int64_t n, int64_t inter) {
#pragma omp parallel for schedule(static) if (n * inter > 65536)
    for (int64_t t = 0; t < n; t++) {
        const float *gate = gu + t * 2 * inter, *up = gate + inter;
        float *dgate = dgu + t * 2 * inter, *dup = dgate + inter;
        for (int64_t j = 0; j < inter; j++) {
            double x = gate[j], u = up[j], d = dh[t * inter + j];
            double th = tanh(GELU_BETA * (x + GELU_KAPPA * x * x * x));
            double gelu = 0.5 * x * (1.0 + th);
            double dgelu = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_BETA * (1.0 + 3.0 * GELU_KAPPA * x * x);
            dup[j] = (float)(d * gelu);
            dgate[j] = (float)(d * u * dgelu);
        }
    }
}

/* The default mode's: float32 with qlt_cpu_tanhf, rows across threads. */
QLT_CPU_VECTOR
void qlt_cpu_geglu_fwd_fast(float *h, const float *gu, int64_t n, int64_t inter) {
#pragma omp parallel for schedule(static) if (n * inter > 65536)
    for (int64_t t = 0; t < n; t++) {
        const float *gate = gu + t * 2 * inter, *up = gate + inter;
        float *ht = h + t * inter;
#pragma omp simd
        for (int64_t j = 0; j < inter; j++) {
            float x = gate[j], th = qlt_cpu_tanhf((float)GELU_BETA * (x + (float)GELU_KAPPA * x * x * x));
            ht[j] = 0.5f * x * (1.0f + th) * up[j];
        }
    }
}

QLT_CPU_VECTOR
void qlt_cpu_geglu_bwd_fast(float *dgu, const float *dh, const float *gu, int64_t n, int64_t inter) {
#pragma omp parallel for schedule(static) if (n * inter > 65536)
    for (int64_t t = 0; t < n; t++) {
        const float *gate = gu + t * 2 * inter, *up = gate + inter, *dht = dh + t * inter;
        float *dgate = dgu + t * 2 * inter, *dup = dgate + inter;
#pragma omp simd
        for (int64_t j = 0; j < inter; j++) {
            float x = gate[j], u = up[j], d = dht[j];
            float th = qlt_cpu_tanhf((float)GELU_BETA * (x + (float)GELU_KAPPA * x * x * x));
            float dgelu = 0.5f * (1.0f + th) +
                          0.5f * x * (1.0f - th * th) * (float)GELU_BETA * (1.0f + 3.0f * (float)GELU_KAPPA * x * x);
            dup[j] = d * 0.5f * x * (1.0f + th);
            dgate[j] = d * u * dgelu;
        }
    }
}
