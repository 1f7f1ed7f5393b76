/* linear.cu: frozen weights (upload, bf16 conversion, the NF4 hook) and the frozen-weight GEMMs of the
 * backend: linear forward (a bias fused through cuBLASLt) and backward-x (in the three backward_a precisions)
 * over a stack of weights read as one matrix (gate+up: one GEMM each way), logits. The LoRA side path is in lora.cu.
 *
 * Row-major GEMMs through column-major cuBLAS: C[M,N] = op(A) op(B) is C^T = op(B)^T op(A)^T, so we
 * call cublasGemmEx with the operands swapped (B first) and M/N exchanged; the ops keep their flags.
 * All GEMMs accumulate in fp32 (CUBLAS_COMPUTE_32F; TF32 is off, so fp32 GEMMs are exact-path SGEMMs).
 *
 * NF4: weight_create uploads the tensor as stored and quantizes it on the GPU (src/cuda/nf4.cu: the same
 * bytes as the CPU reference and bitsandbytes); a bitsandbytes checkpoint's blocks are uploaded as they are;
 * qlt_cuda_weight_bf16 dequantizes into impl->dequant before each use. */
#include "cuda/cuda_common.h"

#include <string.h>

extern "C" {
#include "nf4/nf4.h"
}
#include "cuda/nf4.h"

/* ---- GEMM ---- */

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

/* ---- weights ---- */

/* Device bytes of an NF4 weight's arrays (what qlt_cuda_nf4_alloc allocated), for the memory report. */
static size_t nf4_device_bytes(const qlt_nf4 *q) {
    size_t bytes = (size_t)(q->numel + 1) / 2 + sizeof(float) * 16;
    if (q->double_quant)
        bytes += (size_t)q->nblocks + sizeof(float) * ((size_t)q->nested_nblocks + 256);
    else
        bytes += sizeof(float) * (size_t)q->nblocks;
    return bytes;
}

/* Grows the dequantization scratch to numel bf16 values (load time only, never inside a step). */
int qlt_cuda_reserve_dequant(qlt_backend *be, int64_t numel) {
    cuda_impl *impl = cuda_impl_of(be);
    if (numel <= impl->dequant_elems) return 0;
    CUDA_CHECK(cudaStreamSynchronize(impl->stream));
    qlt_cuda_free_tracked(be, impl->dequant, sizeof(bf16) * (size_t)impl->dequant_elems);
    impl->dequant = (bf16 *)qlt_cuda_alloc_tracked(be, sizeof(bf16) * (size_t)numel);
    impl->dequant_elems = impl->dequant ? numel : 0;
    if (!impl->dequant)
        return qlt_fail("CUDA: out of device memory for the weight dequantization scratch (%.1f MiB)",
                        (double)numel * 2 / (1 << 20));
    return 0;
}

/* Makes w the NF4 weight dq (device arrays) and grows the dequantization scratch (load time only). */
static int nf4_adopt(qlt_backend *be, qlt_weight *w, const qlt_nf4 *dq) {
    cuda_impl *impl = cuda_impl_of(be);
    int64_t numel = dq->numel;
    w->format = QLT_WFORMAT_NF4;
    w->nf4 = *dq;
    qlt_cuda_track(be, (int64_t)nf4_device_bytes(dq));
    (void)impl;
    return qlt_cuda_reserve_dequant(be, numel);
}

int qlt_cuda_weight_from_nf4(qlt_backend *be, qlt_weight *w, qlt_nf4 *host, int64_t rows, int64_t cols) {
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    qlt_nf4 dq;
    if (qlt_cuda_nf4_upload(&dq, host) != 0) return -1;
    qlt_nf4_free_host(host);
    return nf4_adopt(be, w, &dq);
}

int qlt_cuda_weight_create(qlt_backend *be, qlt_weight *w, const void *host, qlt_dtype dtype, int64_t rows,
                           int64_t cols, int nf4_blocksize, int double_quant) {
    cuda_impl *impl = cuda_impl_of(be);
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    int64_t numel = rows * cols;
    if (nf4_blocksize > 0) {
        /* the source tensor goes to the device as stored; the quantizer there writes the same bytes as
         * the CPU reference (and bitsandbytes) */
        QLT_TRY(qlt_nf4_check_blocksize(nf4_blocksize));
        size_t src_bytes = (size_t)numel * qlt_dtype_size(dtype);
        size_t ws_bytes = qlt_cuda_nf4_quantize_workspace(numel, nf4_blocksize, double_quant);
        void *src = qlt_cuda_alloc_tracked(be, src_bytes + ws_bytes);
        if (!src)
            return qlt_fail("CUDA: out of device memory staging a [%lld, %lld] weight for NF4 quantization",
                            (long long)rows, (long long)cols);
        CUDA_CHECK(cudaMemcpyAsync(src, host, src_bytes, cudaMemcpyHostToDevice, impl->stream));
        qlt_nf4 dq;
        int rc = qlt_cuda_nf4_alloc(&dq, numel, nf4_blocksize, double_quant);
        if (rc == 0) rc = qlt_cuda_nf4_quantize(&dq, src, dtype, ws_bytes ? (char *)src + src_bytes : NULL, NULL,
                                                impl->stream);
        CUDA_CHECK(cudaStreamSynchronize(impl->stream));
        qlt_cuda_free_tracked(be, src, src_bytes + ws_bytes);
        if (rc != 0) return -1;
        return nf4_adopt(be, w, &dq);
    }
    bf16 *dst = (bf16 *)qlt_cuda_alloc_tracked(be, sizeof(bf16) * (size_t)numel);
    if (!dst)
        return qlt_fail("CUDA: out of device memory for a [%lld, %lld] bf16 weight (%.1f MiB): use "
                        "--set model.quant=nf4 or a smaller model",
                        (long long)rows, (long long)cols, (double)numel * 2 / (1 << 20));
    w->format = QLT_WFORMAT_BF16;
    w->data = dst;
    if (dtype == QLT_DTYPE_BF16) {
        CUDA_CHECK(cudaMemcpyAsync(dst, host, sizeof(bf16) * (size_t)numel, cudaMemcpyHostToDevice, impl->stream));
        CUDA_CHECK(cudaStreamSynchronize(impl->stream));
        return 0;
    }
    /* other float types: stage through the conversion workspace in chunks, convert on the device */
    size_t stage_bytes = sizeof(float) * 3 * (size_t)QLT_CUDA_CONV_ELEMS;
    int64_t chunk = (int64_t)(stage_bytes / sizeof(float));
    float *host_f32 = NULL;
    if (dtype != QLT_DTYPE_F32 && dtype != QLT_DTYPE_F16) host_f32 = (float *)qlt_xmalloc(sizeof(float) * (size_t)chunk);
    for (int64_t i0 = 0; i0 < numel; i0 += chunk) {
        int64_t cn = numel - i0 < chunk ? numel - i0 : chunk;
        if (dtype == QLT_DTYPE_F32) {
            CUDA_CHECK(cudaMemcpyAsync(impl->conv, (const float *)host + i0, sizeof(float) * (size_t)cn,
                                       cudaMemcpyHostToDevice, impl->stream));
            qlt_cuda_f32_to_bf16(impl->stream, dst + i0, impl->conv, cn);
        } else if (dtype == QLT_DTYPE_F16) {
            CUDA_CHECK(cudaMemcpyAsync(impl->conv, (const uint16_t *)host + i0, 2 * (size_t)cn, cudaMemcpyHostToDevice,
                                       impl->stream));
            qlt_cuda_f16_to_bf16(impl->stream, dst + i0, (const __half *)impl->conv, cn);
        } else {
            qlt_convert_to_f32(host_f32, (const char *)host + (size_t)i0 * qlt_dtype_size(dtype), dtype, (size_t)cn);
            CUDA_CHECK(cudaMemcpyAsync(impl->conv, host_f32, sizeof(float) * (size_t)cn, cudaMemcpyHostToDevice,
                                       impl->stream));
            qlt_cuda_f32_to_bf16(impl->stream, dst + i0, impl->conv, cn);
        }
        CUDA_CHECK(cudaStreamSynchronize(impl->stream)); /* the staging buffer is reused next chunk */
    }
    free(host_f32);
    return 0;
}

void qlt_cuda_weight_free(qlt_backend *be, qlt_weight *w) {
    cuda_impl *impl = cuda_impl_of(be);
    CUDA_CHECK(cudaStreamSynchronize(impl->stream));
    qlt_cuda_cache_drop(be, w);
    if (w->format == QLT_WFORMAT_NF4) {
        qlt_cuda_track(be, -(int64_t)nf4_device_bytes(&w->nf4));
        qlt_cuda_nf4_free(&w->nf4);
    } else if (w->data) {
        qlt_cuda_free_tracked(be, w->data, qlt_dtype_size(w->format == QLT_WFORMAT_F32 ? QLT_DTYPE_F32 : QLT_DTYPE_BF16) *
                                               (size_t)(w->rows * w->cols));
    }
    memset(w, 0, sizeof *w);
}

/* Dequantizes w into dst (stream-ordered), charged to the dequant phase. */
static void dequantize_into(qlt_backend *be, bf16 *dst, const qlt_weight *w) {
    cuda_impl *impl = cuda_impl_of(be);
    qlt_phase was = impl->phase;
    if (be->phase) be->phase(be, QLT_PHASE_DEQUANT);
    QLT_ASSERT(qlt_cuda_nf4_dequantize(&w->nf4, dst, QLT_DTYPE_BF16, impl->stream) == 0);
    if (be->phase) be->phase(be, was);
}

const bf16 *qlt_cuda_weight_bf16(qlt_backend *be, const qlt_weight *w) {
    if (w->format == QLT_WFORMAT_BF16) return (const bf16 *)w->data;
    if (w->format == QLT_WFORMAT_NF4) {
        int64_t ld;
        const bf16 *kept = qlt_cuda_cache_stack(be, &w, 1, w->cols, 1, 0, &ld);
        if (kept) return kept;
        cuda_impl *impl = cuda_impl_of(be);
        QLT_ASSERT(w->rows * w->cols <= impl->dequant_elems);
        dequantize_into(be, impl->dequant, w);
        return impl->dequant;
    }
    QLT_ASSERT(!"CUDA linear ops take bf16 (or NF4) frozen weights");
    return NULL;
}

int qlt_cuda_weight_stack_prepare(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols) {
    for (int i = 0; i < k; i++) QLT_ASSERT(w[i]->cols == w[0]->cols);
    qlt_cuda_cache_announce(be, w, k, extra_cols);
    if (k == 1 && extra_cols == 0) return 0;
    return qlt_cuda_reserve_dequant(be, qlt_stack_rows(w, k) * (w[0]->cols + extra_cols));
}

void qlt_cuda_stack_fill(qlt_backend *be, bf16 *dst, const qlt_weight *const *w, int k, int64_t ld) {
    cuda_impl *impl = cuda_impl_of(be);
    const int64_t cols = w[0]->cols;
    for (int i = 0; i < k; i++) {
        QLT_ASSERT(w[i]->cols == cols);
        if (w[i]->format == QLT_WFORMAT_NF4) {
            qlt_phase was = impl->phase;
            if (be->phase) be->phase(be, QLT_PHASE_DEQUANT);
            QLT_ASSERT(qlt_cuda_nf4_dequantize_rows(&w[i]->nf4, dst, QLT_DTYPE_BF16, cols, ld, impl->stream) == 0);
            if (be->phase) be->phase(be, was);
        } else {
            QLT_ASSERT(w[i]->format == QLT_WFORMAT_BF16);
            qlt_cuda_copy_rows(impl->stream, dst, ld, (const bf16 *)w[i]->data, cols, w[i]->rows, cols);
        }
        dst += w[i]->rows * ld;
    }
}

/* The weights dequantized (NF4) or copied (bf16) side by side into impl->dequant, rows of stride ld, with room
 * for extra_rows more rows after them (reserved at load); *rows = their rows. */
static bf16 *stack_into_dequant(qlt_backend *be, const qlt_weight *const *w, int k, int64_t ld, int64_t extra_rows,
                                int64_t *rows) {
    QLT_ASSERT(k >= 1 && k <= QLT_STACK_MAX);
    *rows = qlt_stack_rows(w, k);
    cuda_impl *impl = cuda_impl_of(be);
    QLT_ASSERT((*rows + extra_rows) * ld <= impl->dequant_elems && ld >= w[0]->cols); /* reserved at load */
    qlt_cuda_stack_fill(be, impl->dequant, w, k, ld);
    return impl->dequant;
}

const bf16 *qlt_cuda_stack_bf16(qlt_backend *be, const qlt_weight *const *w, int k, int64_t *ld, int64_t *rows) {
    if (k == 1 && *ld == w[0]->cols) {
        *rows = w[0]->rows;
        return qlt_cuda_weight_bf16(be, w[0]);
    }
    int64_t kept_ld;
    const bf16 *kept = qlt_cuda_cache_stack(be, w, k, *ld, 0, 0, &kept_ld);
    if (kept) {
        *rows = qlt_stack_rows(w, k);
        *ld = kept_ld;
        return kept;
    }
    return stack_into_dequant(be, w, k, *ld, 0, rows);
}

bf16 *qlt_cuda_stack_bf16_room(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_rows, int64_t *rows) {
    int64_t kept_ld;
    bf16 *kept = qlt_cuda_cache_stack(be, w, k, w[0]->cols, 1, extra_rows, &kept_ld);
    if (kept) {
        *rows = qlt_stack_rows(w, k);
        return kept;
    }
    return stack_into_dequant(be, w, k, w[0]->cols, extra_rows, rows);
}

/* ---- the bias fused into the GEMM (cuBLASLt epilogue) ----
 * y [n, rows] = x W^T + bias with the bias added to the fp32 accumulator before the one bf16 rounding (the
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

void qlt_cuda_linear_release(qlt_backend *be) {
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

/* y = beta y + x W^T + bias through cuBLASLt (beta 0 or 1); false when no plan (the caller falls back) */
static bool gemm_bias(qlt_backend *be, bf16 *y, const bf16 *x, const bf16 *w, const float *bias, int64_t n,
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

/* ---- linear forward: y = beta y + x [W_0; ...]^T (+ bias) ---- */

void qlt_cuda_linear_fwd_onto(qlt_backend *be, void *y, const void *x, const qlt_weight *const *w, int k,
                              const float *bias, int64_t n, float beta) {
    if (n <= 0) return;
    QLT_ASSERT(bias == NULL || k == 1);
    int64_t rows, cols = w[0]->cols, ld = cols;
    const bf16 *wb = qlt_cuda_stack_bf16(be, w, k, &ld, &rows);
    if (bias && ld == cols && gemm_bias(be, (bf16 *)y, (const bf16 *)x, wb, bias, n, rows, cols, beta)) return;
    qlt_cuda_gemm(be, 0, 1, n, rows, cols, 1.0f, x, CUDA_R_16BF, cols, wb, CUDA_R_16BF, ld, beta, y, CUDA_R_16BF,
                  rows);
    if (bias) qlt_cuda_bias_add(cuda_impl_of(be)->stream, (bf16 *)y, bias, n, rows);
}

void qlt_cuda_linear_fwd(qlt_backend *be, void *y, const void *x, const qlt_weight *const *w, int k, const float *bias,
                         int64_t n) {
    qlt_cuda_linear_fwd_onto(be, y, x, w, k, bias, n, 0.0f);
}

/* ---- linear backward-x: dx = beta dx + dy W ----
 * BF16: one cuBLAS GEMM, bf16 operands, bf16 C with beta.
 * FP16: dy and W are scaled by powers of two into fp16 (scale = 2^(14 - ceil(log2 max|.|)), so the
 *       largest magnitude lands in (2^13, 2^14]: no overflow, little underflow), multiplied with fp32
 *       accumulation into an fp32 buffer, then unscaled exactly in the finishing kernel. The scales come
 *       from max|.| reduced on the device (no host sync).
 * FP32: dy and W upconverted to fp32 (exact), SGEMM (no TF32), finished the same way.
 * The fp16/fp32 operands live in the fixed conversion workspace: tokens in chunks of T, the reduction
 * dimension (W rows) in chunks of R, accumulated in fp32 across R chunks. */

static __device__ __forceinline__ float guard_scale(float amax) {
    if (!(amax > 0.0f) || !isfinite(amax)) return 1.0f; /* zero, NaN or inf: leave as is (propagates) */
    int e;
    frexpf(amax, &e); /* amax = m 2^e, m in [0.5, 1): amax <= 2^e */
    return ldexpf(1.0f, 14 - e);
}

static __global__ void amax_kernel(float *amax, const bf16 *x, int64_t rows, int64_t cols, int64_t ld) {
    float m = 0.0f;
    int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i - r * cols;
        float v = fabsf(__bfloat162float(x[r * ld + c]));
        m = (v > m || v != v) ? v : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, m, o);
        m = (other > m || other != other) ? other : m;
    }
    __shared__ float wm[32];
    if ((threadIdx.x & 31) == 0) wm[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < (int)(blockDim.x / 32); i++) m = (wm[i] > m || wm[i] != wm[i]) ? wm[i] : m;
        /* non-negative floats (and NaN, whose bits are larger than inf's) order like their bit patterns */
        atomicMax((unsigned int *)amax, __float_as_uint(m));
    }
}

template <typename OutT>
static __global__ void convert_block_kernel(OutT *out, const bf16 *x, int64_t rows, int64_t cols, int64_t ld,
                                            const float *amax) {
    float s = amax ? guard_scale(*amax) : 1.0f;
    int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i - r * cols;
        float v = __bfloat162float(x[r * ld + c]) * s;
        if constexpr (sizeof(OutT) == 2) out[i] = __float2half_rn(v);
        else out[i] = v;
    }
}

static __global__ void finish_kernel(bf16 *dx, const float *acc, int64_t count, float beta, const float *amax) {
    float inv = 1.0f;
    if (amax) inv = 1.0f / (guard_scale(amax[0]) * guard_scale(amax[1])); /* exact: a power of two */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        float v = acc[i] * inv;
        if (beta != 0.0f) v += beta * __bfloat162float(dx[i]);
        dx[i] = __float2bfloat16(v);
    }
}

static void linear_bwd_x_converted(qlt_backend *be, bf16 *dx, const bf16 *dy, const bf16 *w, int64_t ldw, int64_t n,
                                   int64_t rows, int64_t cols, float beta, bool fp16) {
    cuda_impl *impl = cuda_impl_of(be);
    cudaStream_t s = impl->stream;
    const int64_t cap = QLT_CUDA_CONV_ELEMS;
    QLT_ASSERT(cols <= cap);
    float *acc = impl->conv;
    void *wbuf = impl->conv + cap, *ybuf = impl->conv + 2 * cap;
    int64_t T = cap / cols;
    if (T > n) T = n;
    int64_t R = cap / cols;
    if (R > cap / T) R = cap / T;
    if (R > rows) R = rows;
    cudaDataType_t op_type = fp16 ? CUDA_R_16F : CUDA_R_32F;
    if (fp16) {
        CUDA_CHECK(cudaMemsetAsync(impl->amax, 0, 2 * sizeof(float), s));
        amax_kernel<<<qlt_grid(rows * cols, 256, 1024), 256, 0, s>>>(impl->amax + 1, w, rows, cols, ldw);
        CUDA_CHECK_LAUNCH();
    }
    for (int64_t t0 = 0; t0 < n; t0 += T) {
        int64_t tn = n - t0 < T ? n - t0 : T;
        const bf16 *dyc = dy + t0 * rows;
        if (fp16) {
            CUDA_CHECK(cudaMemsetAsync(impl->amax, 0, sizeof(float), s));
            amax_kernel<<<qlt_grid(tn * rows, 256, 1024), 256, 0, s>>>(impl->amax, dyc, tn, rows, rows);
            CUDA_CHECK_LAUNCH();
        }
        for (int64_t r0 = 0; r0 < rows; r0 += R) {
            int64_t rn = rows - r0 < R ? rows - r0 : R;
            if (fp16) {
                convert_block_kernel<__half><<<qlt_grid(rn * cols, 256), 256, 0, s>>>(
                    (__half *)wbuf, w + r0 * ldw, rn, cols, ldw, impl->amax + 1);
                CUDA_CHECK_LAUNCH();
                convert_block_kernel<__half><<<qlt_grid(tn * rn, 256), 256, 0, s>>>((__half *)ybuf, dyc + r0, tn, rn,
                                                                                   rows, impl->amax);
                CUDA_CHECK_LAUNCH();
            } else {
                convert_block_kernel<float><<<qlt_grid(rn * cols, 256), 256, 0, s>>>((float *)wbuf, w + r0 * ldw, rn,
                                                                                    cols, ldw, nullptr);
                CUDA_CHECK_LAUNCH();
                convert_block_kernel<float><<<qlt_grid(tn * rn, 256), 256, 0, s>>>((float *)ybuf, dyc + r0, tn, rn,
                                                                                  rows, nullptr);
                CUDA_CHECK_LAUNCH();
            }
            qlt_cuda_gemm(be, 0, 0, tn, cols, rn, 1.0f, ybuf, op_type, rn, wbuf, op_type, cols, r0 > 0 ? 1.0f : 0.0f,
                          acc, CUDA_R_32F, cols);
        }
        finish_kernel<<<qlt_grid(tn * cols, 256), 256, 0, s>>>(dx + t0 * cols, acc, tn * cols, beta,
                                                              fp16 ? impl->amax : nullptr);
        CUDA_CHECK_LAUNCH();
    }
}

void qlt_cuda_linear_bwd_x(qlt_backend *be, void *dx, const void *dy, const qlt_weight *const *w, int k, int64_t n,
                           float beta) {
    if (n <= 0) return;
    int64_t rows, cols = w[0]->cols, ld = cols;
    const bf16 *wb = qlt_cuda_stack_bf16(be, w, k, &ld, &rows);
    switch (be->backward_a) {
    case QLT_BACKWARD_A_FP16:
        linear_bwd_x_converted(be, (bf16 *)dx, (const bf16 *)dy, wb, ld, n, rows, cols, beta, true);
        break;
    case QLT_BACKWARD_A_FP32:
        linear_bwd_x_converted(be, (bf16 *)dx, (const bf16 *)dy, wb, ld, n, rows, cols, beta, false);
        break;
    default:
        qlt_cuda_gemm(be, 0, 0, n, cols, rows, 1.0f, dy, CUDA_R_16BF, rows, wb, CUDA_R_16BF, ld, beta, dx,
                      CUDA_R_16BF, cols);
        break;
    }
}

/* ---- logits: out fp32 [N, V] = x W^T ---- */

void qlt_cuda_logits(qlt_backend *be, float *out, const void *x, const qlt_weight *w, int64_t n) {
    if (n <= 0) return;
    const bf16 *wb = qlt_cuda_weight_bf16(be, w);
    qlt_cuda_gemm(be, 0, 1, n, w->rows, w->cols, 1.0f, x, CUDA_R_16BF, w->cols, wb, CUDA_R_16BF, w->cols, 0.0f, out,
                  CUDA_R_32F, w->rows);
}
