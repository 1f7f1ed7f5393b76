/* linear.cu: frozen weights (upload, bf16 conversion, the NF4 hook) and every GEMM of the backend:
 * linear forward, linear backward-x in the three backward_a precisions, the LoRA side path, logits.
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
#include "cpu/nf4.h"
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

/* Makes w the NF4 weight dq (device arrays) and grows the dequantization scratch (load time only). */
static int nf4_adopt(qlt_backend *be, qlt_weight *w, const qlt_nf4 *dq) {
    cuda_impl *impl = cuda_impl_of(be);
    int64_t numel = dq->numel;
    w->format = QLT_WFORMAT_NF4;
    w->nf4 = *dq;
    qlt_cuda_track(be, (int64_t)nf4_device_bytes(dq));
    if (numel > impl->dequant_elems) { /* growth at load time only, never inside a step */
        CUDA_CHECK(cudaStreamSynchronize(impl->stream));
        qlt_cuda_free_tracked(be, impl->dequant, sizeof(bf16) * (size_t)impl->dequant_elems);
        impl->dequant = (bf16 *)qlt_cuda_alloc_tracked(be, sizeof(bf16) * (size_t)numel);
        impl->dequant_elems = impl->dequant ? numel : 0;
        if (!impl->dequant) return qlt_fail("CUDA: out of device memory for the NF4 dequantization scratch");
    }
    return 0;
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
    if (w->format == QLT_WFORMAT_NF4) {
        qlt_cuda_track(be, -(int64_t)nf4_device_bytes(&w->nf4));
        qlt_cuda_nf4_free(&w->nf4);
    } else if (w->data) {
        qlt_cuda_free_tracked(be, w->data, qlt_dtype_size(w->format == QLT_WFORMAT_F32 ? QLT_DTYPE_F32 : QLT_DTYPE_BF16) *
                                               (size_t)(w->rows * w->cols));
    }
    memset(w, 0, sizeof *w);
}

const bf16 *qlt_cuda_weight_bf16(qlt_backend *be, const qlt_weight *w) {
    if (w->format == QLT_WFORMAT_BF16) return (const bf16 *)w->data;
    if (w->format == QLT_WFORMAT_NF4) {
        cuda_impl *impl = cuda_impl_of(be);
        QLT_ASSERT(w->rows * w->cols <= impl->dequant_elems);
        qlt_phase was = impl->phase;
        if (be->phase) be->phase(be, QLT_PHASE_DEQUANT);
        QLT_ASSERT(qlt_cuda_nf4_dequantize(&w->nf4, impl->dequant, QLT_DTYPE_BF16, impl->stream) == 0);
        if (be->phase) be->phase(be, was);
        return impl->dequant;
    }
    QLT_ASSERT(!"CUDA linear ops take bf16 (or NF4) frozen weights");
    return NULL;
}

/* ---- linear forward: y = x W^T (+ bias) ---- */

void qlt_cuda_linear_fwd(qlt_backend *be, void *y, const void *x, const qlt_weight *w, const float *bias, int64_t n) {
    if (n <= 0) return;
    const bf16 *wb = qlt_cuda_weight_bf16(be, w);
    qlt_cuda_gemm(be, 0, 1, n, w->rows, w->cols, 1.0f, x, CUDA_R_16BF, w->cols, wb, CUDA_R_16BF, w->cols, 0.0f, y,
                  CUDA_R_16BF, w->rows);
    if (bias) qlt_cuda_bias_add(cuda_impl_of(be)->stream, (bf16 *)y, bias, n, w->rows);
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

static void linear_bwd_x_converted(qlt_backend *be, bf16 *dx, const bf16 *dy, const bf16 *w, int64_t n, int64_t rows,
                                   int64_t cols, float beta, bool fp16) {
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
        amax_kernel<<<qlt_grid(rows * cols, 256, 1024), 256, 0, s>>>(impl->amax + 1, w, rows, cols, cols);
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
                    (__half *)wbuf, w + r0 * cols, rn, cols, cols, impl->amax + 1);
                CUDA_CHECK_LAUNCH();
                convert_block_kernel<__half><<<qlt_grid(tn * rn, 256), 256, 0, s>>>((__half *)ybuf, dyc + r0, tn, rn,
                                                                                   rows, impl->amax);
                CUDA_CHECK_LAUNCH();
            } else {
                convert_block_kernel<float><<<qlt_grid(rn * cols, 256), 256, 0, s>>>((float *)wbuf, w + r0 * cols, rn,
                                                                                    cols, cols, nullptr);
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

void qlt_cuda_linear_bwd_x(qlt_backend *be, void *dx, const void *dy, const qlt_weight *w, int64_t n, float beta) {
    if (n <= 0) return;
    const bf16 *wb = qlt_cuda_weight_bf16(be, w);
    switch (be->backward_a) {
    case QLT_BACKWARD_A_FP16:
        linear_bwd_x_converted(be, (bf16 *)dx, (const bf16 *)dy, wb, n, w->rows, w->cols, beta, true);
        break;
    case QLT_BACKWARD_A_FP32:
        linear_bwd_x_converted(be, (bf16 *)dx, (const bf16 *)dy, wb, n, w->rows, w->cols, beta, false);
        break;
    default:
        qlt_cuda_gemm(be, 0, 0, n, w->cols, w->rows, 1.0f, dy, CUDA_R_16BF, w->rows, wb, CUDA_R_16BF, w->cols, beta,
                      dx, CUDA_R_16BF, w->cols);
        break;
    }
}

/* ---- LoRA ----
 * A, B, u, du are fp32; tensor-core GEMMs need one type on both sides, so each fp32 operand f is split
 * into bf16 hi = bf16(f), lo = bf16(f - hi) (f = hi + lo to ~2^-17 relative). Products of an fp32 with a
 * bf16 activation use both halves (two GEMMs into fp32 C); products of two fp32 operands use
 * hi*hi + hi*lo + lo*hi as ONE GEMM over a concatenated K = 3r ([uh, uh, ul] . [bh, bl, bh]^T), so a
 * bf16 output is rounded once. Parameter gradients therefore carry only the bf16 rounding of the
 * activations (x, dy), as they would in fp32 LoRA math on bf16 activations.
 * Workspace (impl->lora_ws): A3 [3r, in] = [Ah; Al; Ah], B3 [out, 3r] rows [bh, bl, bh], then token
 * chunks U3 / DU3 [T, 3r] rows [hi, hi, lo]. */

/* out [rows, 3r]: row i = pattern of hi/lo of x[i, :] (lo_third: which third holds lo) */
static __global__ void split3_rows_kernel(bf16 *out, const float *x, int64_t rows, int r, int lo_third) {
    int64_t total = rows * r;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / r;
        int j = (int)(i - row * r);
        float v = x[i];
        bf16 hi = __float2bfloat16(v), lo = __float2bfloat16(v - __bfloat162float(hi));
        bf16 *o = out + row * 3 * r + j;
        o[0] = lo_third == 0 ? lo : hi;
        o[r] = lo_third == 1 ? lo : hi;
        o[2 * r] = lo_third == 2 ? lo : hi;
    }
}

/* out [3r, in] = [hi(A); lo(A); hi(A)] */
static __global__ void stack3_kernel(bf16 *out, const float *a, int64_t count) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        float v = a[i];
        bf16 hi = __float2bfloat16(v), lo = __float2bfloat16(v - __bfloat162float(hi));
        out[i] = hi;
        out[count + i] = lo;
        out[2 * count + i] = hi;
    }
}

typedef struct lora_ws {
    bf16 *a3, *b3, *tok; /* tok: [T, 3r] */
    int64_t T;
} lora_ws;

static lora_ws lora_layout(qlt_backend *be, int64_t in, int64_t out, int r, int64_t n) {
    cuda_impl *impl = cuda_impl_of(be);
    lora_ws L;
    int64_t wel = 3 * (int64_t)r * (in + out);
    int64_t cap = (int64_t)(QLT_CUDA_LORA_BYTES / sizeof(bf16));
    if (wel + 3 * (int64_t)r * 16 > cap) {
        fprintf(stderr, "qlora-train: LoRA r=%d on a [%lld, %lld] layer needs more than the %zu MiB LoRA workspace "
                        "(raise QLT_CUDA_LORA_BYTES in src/cuda/cuda_common.h)\n",
                r, (long long)out, (long long)in, QLT_CUDA_LORA_BYTES >> 20);
        abort();
    }
    L.a3 = (bf16 *)impl->lora_ws;
    L.b3 = L.a3 + 3 * (int64_t)r * in;
    int64_t tok_off = (wel + 7) & ~(int64_t)7; /* keep the token area 16-byte aligned */
    L.tok = (bf16 *)impl->lora_ws + tok_off;
    L.T = (cap - tok_off) / (3 * (int64_t)r);
    if (L.T > n) L.T = n;
    return L;
}

/* the workspace layout, with A3 and B3 built from the current A and B */
static lora_ws lora_prepare(qlt_backend *be, const float *a, const float *b, int64_t in, int64_t out, int r, int64_t n) {
    cudaStream_t s = cuda_impl_of(be)->stream;
    lora_ws L = lora_layout(be, in, out, r, n);
    stack3_kernel<<<qlt_grid((int64_t)r * in, 256), 256, 0, s>>>(L.a3, a, (int64_t)r * in);
    CUDA_CHECK_LAUNCH();
    split3_rows_kernel<<<qlt_grid(out * r, 256), 256, 0, s>>>(L.b3, b, out, r, 1);
    CUDA_CHECK_LAUNCH();
    return L;
}

/* dst[i, j] = (accumulate ? dst[i, j] : 0) + src[i*lds + j] + src[i*lds + j + off], i < rows, j < cols:
 * the sum of the hi and lo halves of a [hi | lo] product (column halves: off = cols, lds = 2 cols; row
 * halves: off = rows * lds). */
static __global__ void sum_halves_kernel(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t off,
                                         int64_t rows, int64_t cols, int accumulate) {
    int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / cols, col = i - row * cols;
        float v = src[row * lds + col] + src[row * lds + col + off];
        float *d = dst + row * ldd + col;
        *d = accumulate ? *d + v : v;
    }
}

static void sum_halves(cudaStream_t s, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t off, int64_t rows,
                       int64_t cols, int accumulate) {
    sum_halves_kernel<<<qlt_grid(rows * cols, 256), 256, 0, s>>>(dst, ldd, src, lds, off, rows, cols, accumulate);
    CUDA_CHECK_LAUNCH();
}

/* Tokens per chunk whose [tokens, 2r] fp32 products fit the accumulation workspace. */
static int64_t acc_tokens(int r, int64_t n) {
    int64_t t = (int64_t)(QLT_CUDA_LORA_ACC_BYTES / sizeof(float)) / (2 * (int64_t)r);
    return t < n ? t : n;
}

void qlt_cuda_lora_fwd(qlt_backend *be, void *y, float *u, const void *x, const float *a, const float *b, int64_t n,
                       int64_t in, int64_t out, int r, float scale) {
    if (n <= 0) return;
    cuda_impl *impl = cuda_impl_of(be);
    cudaStream_t s = impl->stream;
    lora_ws L = lora_prepare(be, a, b, in, out, r, n);
    /* u = x Ah^T + x Al^T (fp32): one GEMM against [Ah; Al] (x read once), then the halves summed */
    const int64_t ta = acc_tokens(r, n);
    for (int64_t t0 = 0; t0 < n; t0 += ta) {
        int64_t tn = n - t0 < ta ? n - t0 : ta;
        qlt_cuda_gemm(be, 0, 1, tn, 2 * r, in, 1.0f, (const bf16 *)x + t0 * in, CUDA_R_16BF, in, L.a3, CUDA_R_16BF, in,
                      0.0f, impl->lora_acc, CUDA_R_32F, 2 * r);
        sum_halves(s, u + t0 * r, r, impl->lora_acc, 2 * r, r, tn, r, 0);
    }
    /* y += scale [uh uh ul] [bh bl bh]^T */
    for (int64_t t0 = 0; t0 < n; t0 += L.T) {
        int64_t tn = n - t0 < L.T ? n - t0 : L.T;
        split3_rows_kernel<<<qlt_grid(tn * r, 256), 256, 0, s>>>(L.tok, u + t0 * r, tn, r, 2);
        CUDA_CHECK_LAUNCH();
        qlt_cuda_gemm(be, 0, 1, tn, out, 3 * r, scale, L.tok, CUDA_R_16BF, 3 * r, L.b3, CUDA_R_16BF, 3 * r, 1.0f,
                      (bf16 *)y + t0 * out, CUDA_R_16BF, out);
    }
}

void qlt_cuda_lora_bwd(qlt_backend *be, void *dx, float *da, float *db, float *scratch, const void *dy, const void *x,
                       const float *u, const float *a, const float *b, int64_t n, int64_t in, int64_t out, int r,
                       float scale, float dx_beta) {
    if (n <= 0) return;
    cuda_impl *impl = cuda_impl_of(be);
    cudaStream_t s = impl->stream;
    lora_ws L = lora_prepare(be, a, b, in, out, r, n);
    float *acc = impl->lora_acc;
    QLT_ASSERT((int64_t)2 * r * (in > out ? in : out) * (int64_t)sizeof(float) <= (int64_t)QLT_CUDA_LORA_ACC_BYTES);
    float *du = scratch; /* [n, r] */
    /* du = scale dy (Bh + Bl): one GEMM against B3's columns [bh | bl] (dy read once), halves summed */
    const int64_t ta = acc_tokens(r, n);
    for (int64_t t0 = 0; t0 < n; t0 += ta) {
        int64_t tn = n - t0 < ta ? n - t0 : ta;
        qlt_cuda_gemm(be, 0, 0, tn, 2 * r, out, scale, (const bf16 *)dy + t0 * out, CUDA_R_16BF, out, L.b3, CUDA_R_16BF,
                      3 * r, 0.0f, acc, CUDA_R_32F, 2 * r);
        sum_halves(s, du + t0 * r, r, acc, 2 * r, r, tn, r, 0);
    }
    for (int64_t t0 = 0; t0 < n; t0 += L.T) {
        int64_t tn = n - t0 < L.T ? n - t0 : L.T;
        const bf16 *dyc = (const bf16 *)dy + t0 * out, *xc = (const bf16 *)x + t0 * in;
        /* dB += scale dy^T (uh + ul): one GEMM against the token rows' [uh | ul] columns, halves summed */
        split3_rows_kernel<<<qlt_grid(tn * r, 256), 256, 0, s>>>(L.tok, u + t0 * r, tn, r, 2);
        CUDA_CHECK_LAUNCH();
        qlt_cuda_gemm(be, 1, 0, out, 2 * r, tn, scale, dyc, CUDA_R_16BF, out, L.tok + r, CUDA_R_16BF, 3 * r, 0.0f, acc,
                      CUDA_R_32F, 2 * r);
        sum_halves(s, db, r, acc, 2 * r, r, out, r, 1);
        /* dA += (duh + dul)^T x: one GEMM [duh | dul]^T x -> [2r, in] (x read once), row halves summed */
        split3_rows_kernel<<<qlt_grid(tn * r, 256), 256, 0, s>>>(L.tok, du + t0 * r, tn, r, 2);
        CUDA_CHECK_LAUNCH();
        qlt_cuda_gemm(be, 1, 0, 2 * r, in, tn, 1.0f, L.tok + r, CUDA_R_16BF, 3 * r, xc, CUDA_R_16BF, in, 0.0f, acc,
                      CUDA_R_32F, in);
        sum_halves(s, da, in, acc, in, (int64_t)r * in, r, in, 1);
        /* dx = beta dx + [duh duh dul] [Ah; Al; Ah] */
        if (dx)
            qlt_cuda_gemm(be, 0, 0, tn, in, 3 * r, 1.0f, L.tok, CUDA_R_16BF, 3 * r, L.a3, CUDA_R_16BF, in, dx_beta,
                          (bf16 *)dx + t0 * in, CUDA_R_16BF, in);
    }
}

/* ---- logits: out fp32 [N, V] = x W^T ---- */

void qlt_cuda_logits(qlt_backend *be, float *out, const void *x, const qlt_weight *w, int64_t n) {
    if (n <= 0) return;
    const bf16 *wb = qlt_cuda_weight_bf16(be, w);
    qlt_cuda_gemm(be, 0, 1, n, w->rows, w->cols, 1.0f, x, CUDA_R_16BF, w->cols, wb, CUDA_R_16BF, w->cols, 0.0f, out,
                  CUDA_R_32F, w->rows);
}
