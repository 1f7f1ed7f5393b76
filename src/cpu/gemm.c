/* gemm.c: the reference matrix product every CPU linear / LoRA op is built on. Double accumulators
 * (chunks of 256 output columns on the stack) keep the float32 reference close to float64 goldens. */
#include <string.h>

#include "cpu/cpu_ops.h"

#define GEMM_CHUNK 256

void qlt_cpu_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
#pragma omp parallel for schedule(static) if (m * n * k > 65536)
    for (int64_t i = 0; i < m; i++) {
        double acc[GEMM_CHUNK];
        for (int64_t j0 = 0; j0 < n; j0 += GEMM_CHUNK) {
            int64_t jn = n - j0 < GEMM_CHUNK ? n - j0 : GEMM_CHUNK;
            if (trans_b) { /* B stored [N, K]: each output is a contiguous dot product */
                for (int64_t jj = 0; jj < jn; jj++) {
                    const float *brow = b + (j0 + jj) * ldb;
                    double s = 0;
                    for (int64_t p = 0; p < k; p++) s += (double)(trans_a ? a[p * lda + i] : a[i * lda + p]) * brow[p];
                    acc[jj] = s;
                }
            } else { /* B stored [K, N]: accumulate rows of B */
                memset(acc, 0, sizeof(double) * (size_t)jn);
                for (int64_t p = 0; p < k; p++) {
                    double av = trans_a ? a[p * lda + i] : a[i * lda + p];
                    const float *brow = b + p * ldb + j0;
                    for (int64_t jj = 0; jj < jn; jj++) acc[jj] += av * brow[jj];
                }
            }
            float *crow = c + i * ldc + j0;
            for (int64_t jj = 0; jj < jn; jj++)
                crow[jj] = (float)(alpha * acc[jj] + (beta != 0 ? (double)beta * crow[jj] : 0.0));
        }
    }
}
