/* rmsnorm.c: RMSNorm forward and backward, reference and default mode (HF: x * rsqrt(mean(x^2) + eps) * w, in
 * float32 with the variance in double here). Also used per head for Qwen3's q/k norms. */
#include <math.h>

#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"

void qlt_cpu_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t d, float eps) {
#pragma omp parallel for schedule(static) if (n * d > 65536)
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d;
        double ss = 0;
        for (int64_t j = 0; j < d; j++) ss += (double)xr[j] * xr[j];
        double r = 1.0 / sqrt(ss / (double)d + (double)eps);
        rstd[i] = (float)r;
        for (int64_t j = 0; j < d; j++) y[i * d + j] = (float)(xr[j] * r * w[j]);
    }
}

/* y_j = w_j x_j r, r = (mean(x^2)+eps)^-1/2  =>  dx_j = r (w_j dy_j) - x_j r^3 / d * sum_k (w_k dy_k x_k) */
void qlt_cpu_rmsnorm_bwd(float *dx, const float *dy, const float *x, const float *rstd, const float *w,
                         int64_t n, int64_t d, float beta) {
#pragma omp parallel for schedule(static) if (n * d > 65536)
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d, *dyr = dy + i * d;
        double r = rstd[i], dot = 0;
        for (int64_t j = 0; j < d; j++) dot += (double)w[j] * dyr[j] * xr[j];
        double c = r * r * r * dot / (double)d;
        for (int64_t j = 0; j < d; j++) {
            double g = r * w[j] * dyr[j] - xr[j] * c;
            dx[i * d + j] = (float)(g + (beta != 0 ? (double)beta * dx[i * d + j] : 0.0));
        }
    }
}

/* The default mode's: sums of squares in double over 8 lanes, the rest in float32, rows across threads. */
QLT_CPU_VECTOR
void qlt_cpu_rmsnorm_fwd_fast(float *y, float *rstd, const float *x, const float *w, int64_t n, int64_t d, float eps) {
#pragma omp parallel for schedule(static) if (n * d > 65536)
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d;
        float *yr = y + i * d;
        double ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int64_t j = 0; j < d; j++) ss += (double)xr[j] * xr[j];
        float r = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
        rstd[i] = r;
#pragma omp simd
        for (int64_t j = 0; j < d; j++) yr[j] = xr[j] * r * w[j];
    }
}

QLT_CPU_VECTOR
void qlt_cpu_rmsnorm_bwd_fast(float *dx, const float *dy, const float *x, const float *rstd, const float *w,
                              int64_t n, int64_t d, float beta) {
#pragma omp parallel for schedule(static) if (n * d > 65536)
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * d, *dyr = dy + i * d;
        float *dxr = dx + i * d;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < d; j++) dot += (double)(w[j] * dyr[j]) * xr[j];
        float r = rstd[i], c = (float)((double)r * r * r * dot / (double)d);
        if (beta != 0) {
#pragma omp simd
            for (int64_t j = 0; j < d; j++) dxr[j] = r * w[j] * dyr[j] - xr[j] * c + beta * dxr[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < d; j++) dxr[j] = r * w[j] * dyr[j] - xr[j] * c;
        }
    }
}
