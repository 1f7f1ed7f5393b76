/* gemm.c: the two matrix products the CPU ops are built on. qlt_cpu_gemm is the reference: double
 * accumulators (chunks of 256 output columns on the stack) keep the float32 reference close to float64
 * goldens, and the GPU checks compare against it. qlt_cpu_sgemm is the default mode's product: OpenBLAS's
 * float32 sgemm (same arguments), which runs on the OpenMP threads of the caller (outside a parallel
 * region on all of them, inside one on the calling thread alone). */
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "cpu/cpu_fast.h"
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

static void blas(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (blasint)m,
                (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

/* A product with a side this short (the LoRA products: r columns or a K of r) and at least SGEMM_SPLIT_MIN
 * multiply-adds runs as one single-threaded sgemm a thread, each over its share of the longer of M and N:
 * OpenBLAS's own threading would synchronize its threads several times inside so thin a product. Smaller
 * ones are left to OpenBLAS (which runs the smallest on one thread). */
#define SGEMM_SKINNY 64
#define SGEMM_SPLIT_MIN (1 << 20)
/* Shares of M or N are multiples of this (whole register tiles). */
#define SGEMM_SPLIT_ALIGN 16

void qlt_cpu_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* BLAS leaves C alone only for beta 1; the product of an empty sum is 0 */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta != 0 ? beta * c[i * ldc + j] : 0.0f;
        return;
    }
    /* OpenBLAS's blasint is 32-bit: every size and leading dimension must fit it (a count of elements may not) */
    QLT_ASSERT(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && lda <= INT32_MAX && ldb <= INT32_MAX &&
               ldc <= INT32_MAX);
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int64_t longer = m >= n ? m : n;
    const int skinny = m < SGEMM_SKINNY || n < SGEMM_SKINNY || k < SGEMM_SKINNY;
    if (threads == 1 || !skinny || (double)m * (double)n * (double)k < SGEMM_SPLIT_MIN ||
        longer < 2 * SGEMM_SPLIT_ALIGN) {
        blas(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    const int64_t tiles = (longer + SGEMM_SPLIT_ALIGN - 1) / SGEMM_SPLIT_ALIGN;
#pragma omp parallel num_threads(threads)
    {
        const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t lo = tiles * t / nt * SGEMM_SPLIT_ALIGN, hi = tiles * (t + 1) / nt * SGEMM_SPLIT_ALIGN;
        hi = hi < longer ? hi : longer;
        if (lo < hi) {
            if (m >= n) /* rows lo..hi of C: those of op(A) */
                blas(trans_a, trans_b, hi - lo, n, k, alpha, trans_a ? a + lo : a + lo * lda, lda, b, ldb, beta,
                     c + lo * ldc, ldc);
            else /* columns lo..hi of C: those of op(B) */
                blas(trans_a, trans_b, m, hi - lo, k, alpha, a, lda, trans_b ? b + lo * ldb : b + lo, ldb, beta, c + lo,
                     ldc);
        }
    }
}
