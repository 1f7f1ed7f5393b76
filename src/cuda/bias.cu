/* bias.cu: a linear layer's bias fused into its GEMM through a cuBLASLt epilogue. */
#include "cuda/cuda_common.h"

#include <string.h>

/* y [n, rows] = x W^T + bias with the bias added to the fp32 accumulator before the one bf16 rounding (the
 * unfused form rounds x W^T to bf16 first, then again after the add, and makes a pass over y). cuBLASLt
 * wants a bf16 bias with bf16 outputs: bias_prepare (load time) keeps a bf16 copy of each bias, exact for
 * bf16 checkpoints (Hugging Face adds the same bf16 bias in F.linear). A plan (descriptors and the
 * heuristic's algorithm) is made once per shape, on first use: host calls only, so a first use under graph
 * capture is fine. A shape cuBLASLt declines, or a bias without a copy, takes the GEMM + bias kernel. */

struct lt_bias_plan {
    int64_t n, rows, cols;
    int ok;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

#define LT_BIAS_PLANS 32

static lt_bias_plan *bias_plan(cuda_impl *impl, int64_t n, int64_t rows, int64_t cols) {
    for (int i = 0; i < impl->n_bias_plans; i++) {
        lt_bias_plan *p = &impl->bias_plans[i];
        if (p->n == n && p->rows == rows && p->cols == cols) return p;
    }
    if (!impl->bias_plans) impl->bias_plans = (lt_bias_plan *)calloc(LT_BIAS_PLANS, sizeof(lt_bias_plan));
    if (!impl->bias_plans || impl->n_bias_plans == LT_BIAS_PLANS) return NULL;
    lt_bias_plan *p = &impl->bias_plans[impl->n_bias_plans++];
    memset(p, 0, sizeof *p);
    p->n = n, p->rows = rows, p->cols = cols;
    /* column-major view, as qlt_cuda_gemm: C [rows, n] = W^T-op [rows, cols] . X [cols, n]; the bias runs
     * along C's rows (= our output features), broadcast over the tokens */
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bias_type = CUDA_R_16BF; /* cuBLASLt takes an fp32 bias only with fp32 outputs */
    cublasLtMatmulPreference_t pref = NULL;
    size_t ws = 0; /* no workspace, as cuBLAS (backend_cuda.cu says why) */
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE; /* split-K partial sums in fp32, never bf16 */
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    bool made = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                               sizeof bias_type) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)cols, (uint64_t)rows, cols) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)cols, (uint64_t)n, cols) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, (uint64_t)rows, (uint64_t)n, rows) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
                    CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                                     sizeof reduction) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulAlgoGetHeuristic(impl->lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found) ==
                    CUBLAS_STATUS_SUCCESS;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    p->ok = made && found > 0;
    if (p->ok) p->algo = result.algo;
    return p;
}

int qlt_cuda_bias_prepare(qlt_backend *be, const float *bias, int64_t n) {
    cuda_impl *impl = cuda_impl_of(be);
    if (impl->plan.on) { /* counted, kept for the plan's lifetime */
        qlt_cuda_track(be, (int64_t)(sizeof(bf16) * (size_t)n));
        return 0;
    }
    if (impl->n_bias_copies == impl->cap_bias_copies) {
        int cap = impl->cap_bias_copies ? 2 * impl->cap_bias_copies : 64;
        impl->bias_copies = (cuda_bias_copy *)qlt_xrealloc(impl->bias_copies, sizeof(cuda_bias_copy) * (size_t)cap);
        impl->cap_bias_copies = cap;
    }
    bf16 *copy = (bf16 *)qlt_cuda_alloc_tracked(be, sizeof(bf16) * (size_t)n);
    if (!copy) return qlt_fail("CUDA: out of device memory for a bias of %lld values", (long long)n);
    qlt_cuda_f32_to_bf16(impl->stream, copy, bias, n);
    impl->bias_copies[impl->n_bias_copies++] = (cuda_bias_copy){bias, copy, n};
    return 0;
}

void qlt_cuda_bias_forget(qlt_backend *be, const float *bias) {
    cuda_impl *impl = cuda_impl_of(be);
    for (int i = impl->n_bias_copies - 1; i >= 0; i--) {
        cuda_bias_copy c = impl->bias_copies[i];
        if (c.f32 != bias) continue;
        impl->bias_copies[i] = impl->bias_copies[--impl->n_bias_copies];
        CUDA_CHECK(cudaStreamSynchronize(impl->stream)); /* frees happen outside steps */
        qlt_cuda_free_tracked(be, c.bf, sizeof(bf16) * (size_t)c.n);
    }
}

static const bf16 *bias_copy(const cuda_impl *impl, const float *bias) {
    for (int i = impl->n_bias_copies - 1; i >= 0; i--)
        if (impl->bias_copies[i].f32 == bias) return impl->bias_copies[i].bf;
    return NULL;
}

void qlt_cuda_bias_release(qlt_backend *be) {
    cuda_impl *impl = cuda_impl_of(be);
    for (int i = 0; i < impl->n_bias_plans; i++) {
        lt_bias_plan *p = &impl->bias_plans[i];
        if (p->c) cublasLtMatrixLayoutDestroy(p->c);
        if (p->b) cublasLtMatrixLayoutDestroy(p->b);
        if (p->a) cublasLtMatrixLayoutDestroy(p->a);
        if (p->op) cublasLtMatmulDescDestroy(p->op);
    }
    free(impl->bias_plans);
    impl->bias_plans = NULL;
    impl->n_bias_plans = 0;
    for (int i = 0; i < impl->n_bias_copies; i++)
        qlt_cuda_free_tracked(be, impl->bias_copies[i].bf, sizeof(bf16) * (size_t)impl->bias_copies[i].n);
    free(impl->bias_copies);
    impl->bias_copies = NULL;
    impl->n_bias_copies = impl->cap_bias_copies = 0;
}

bool qlt_cuda_gemm_bias(qlt_backend *be, bf16 *y, const bf16 *x, const bf16 *w, const float *bias, int64_t n,
                      int64_t rows, int64_t cols, float beta) {
    cuda_impl *impl = cuda_impl_of(be);
    const bf16 *b16 = bias_copy(impl, bias);
    if (!b16) return false;
    lt_bias_plan *p = bias_plan(impl, n, rows, cols);
    if (!p || !p->ok) return false;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b16, sizeof b16));
    const float one = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(impl->lt, p->op, &one, w, p->a, x, p->b, &beta, y, p->c, y, p->c, &p->algo,
                                NULL, 0, impl->stream));
    return true;
}
