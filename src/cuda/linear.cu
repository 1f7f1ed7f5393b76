/* linear.cu: the frozen-weight products of the backend: linear forward (a bias fused through cuBLASLt,
 * bias.cu) and backward-x (in the three backward_a precisions) over a stack of weights read as one matrix
 * (weight_stack.cu; gate+up: one GEMM each way), and logits. The LoRA side path is in lora.cu. */
#include "cuda/cuda_common.h"

/* ---- linear forward: y = beta y + x [W_0; ...]^T (+ bias) ---- */

void qlt_cuda_linear_fwd_onto(qlt_backend *be, void *y, const void *x, const qlt_weight *const *w, int k,
                              const float *bias, int64_t n, float beta) {
    if (n <= 0) return;
    QLT_ASSERT(bias == NULL || k == 1);
    /* a few tokens (generation) on NF4 weights: each weight's codes read once by the GEMV, no bf16 copy */
    if (beta == 0.0f && be->dequant_cache_bytes == 0 && n <= QLT_NF4_GEMV_MAX_TOKENS) {
        bool gemv = true;
        for (int i = 0; i < k; i++) gemv = gemv && qlt_cuda_nf4_gemv_applies(w[i], n, x);
        if (gemv) {
            qlt_cuda_nf4_gemv(be, (bf16 *)y, qlt_stack_rows(w, k), (const bf16 *)x, w, k, bias, n);
            return;
        }
    }
    int64_t rows, cols = w[0]->cols, ld = cols;
    const bf16 *wb = qlt_cuda_stack_bf16(be, w, k, &ld, &rows);
    if (bias && ld == cols && qlt_cuda_gemm_bias(be, (bf16 *)y, (const bf16 *)x, wb, bias, n, rows, cols, beta)) return;
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
