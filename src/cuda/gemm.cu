/* gemm.cu: the one row-major GEMM wrapper every frozen and LoRA product goes through.
 *
 * Row-major GEMMs through column-major cuBLAS: C[M,N] = op(A) op(B) is C^T = op(B)^T op(A)^T, so we
 * call cublasGemmEx with the operands swapped (B first) and M/N exchanged; the ops keep their flags.
 * All GEMMs accumulate in fp32 (CUBLAS_COMPUTE_32F; TF32 is off, so fp32 GEMMs are exact-path SGEMMs). */
#include "cuda/cuda_common.h"

void qlt_cuda_gemm(qlt_backend *be, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const void *a, cudaDataType_t ta, int64_t lda, const void *b, cudaDataType_t tb, int64_t ldb,
                   float beta, void *c, cudaDataType_t tc, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    cuda_impl *impl = cuda_impl_of(be);
    if (k <= 0) {
        /* nothing to multiply: C = beta C (only beta 0 / 1 occur) */
        if (beta == 0.0f) {
            size_t es = tc == CUDA_R_32F ? 4 : 2;
            if (ldc == n) CUDA_CHECK(cudaMemsetAsync(c, 0, es * (size_t)(m * n), impl->stream));
            else CUDA_CHECK(cudaMemset2DAsync(c, es * (size_t)ldc, 0, es * (size_t)n, (size_t)m, impl->stream));
        }
        return;
    }
    QLT_ASSERT(m < INT32_MAX && n < INT32_MAX && k < INT32_MAX);
    CUBLAS_CHECK(cublasGemmEx(impl->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                              (int)n, (int)m, (int)k, &alpha, b, tb, (int)ldb, a, ta, (int)lda, &beta, c, tc, (int)ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
