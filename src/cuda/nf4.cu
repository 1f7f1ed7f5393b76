/* nf4.cu: NF4 quantize (bit-exact with the CPU reference and bitsandbytes) and a memory-bound dequantize.
 *
 * Exactness: bitsandbytes builds its kernels with --use_fast_math, so its 1/absmax is rcp.approx.ftz.f32
 * and its products and maxima flush subnormals (mul.ftz / max.ftz / abs.ftz). We are built without fast
 * math, so those instructions are spelled out in inline PTX below; everything else is a plain IEEE op
 * with no fma to contract. The double-quant mean is a fixed-order double sum (chunks of
 * QLT_NF4_MEAN_CHUNK), the order the CPU reference uses.
 *
 * Layers (ggml-cuda style): static __global__ *_kernel, a static launcher taking the stream that checks
 * the launch, and the extern "C" entry points of nf4.h. */
#include "nf4/nf4_search.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdio.h>

extern "C" {
#include "common/dtype.h"
#include "common/error.h"
#include "nf4/nf4.h"
}
#include "cuda/nf4.h"

/* Checks a CUDA runtime call; on failure records "statement failed at file:line: error" and returns -1. */
#define NF4_CUDA_CHECK(stmt)                                                                              \
    do {                                                                                                \
        cudaError_t err_ = (stmt);                                                                      \
        if (err_ != cudaSuccess)                                                                        \
            return qlt_fail("CUDA: %s failed at %s:%d: %s", #stmt, __FILE__, __LINE__,                  \
                            cudaGetErrorString(err_));                                                  \
    } while (0)

/* ---- bitsandbytes' fast-math arithmetic ---- */

static __device__ __forceinline__ float rcp_ftz(float a) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}
static __device__ __forceinline__ float mul_ftz(float a, float b) {
    float r;
    asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
static __device__ __forceinline__ float max_ftz(float a, float b) {
    float r;
    asm("max.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
static __device__ __forceinline__ float abs_ftz(float a) {
    float r;
    asm("abs.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}

static __device__ __forceinline__ float to_f32(float x) { return x; }
static __device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
static __device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

/* the searches shared with the CPU reference (nf4/nf4_search.h) */
static __device__ __forceinline__ unsigned nf4_code(float x) { return qlt_nf4_tree_code(x); }
static __device__ __forceinline__ unsigned dynamic_code(const float *code, float x) {
    return qlt_nf4_dynamic_search(code, x);
}

static __device__ __forceinline__ float warp_max(float m) {
    /* max is exact and order-free, so the butterfly gives the same value as the CPU's loop */
    for (int o = 16; o > 0; o >>= 1) m = max_ftz(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}

/* ---- quantize: one warp per block ---- */

template <typename T>
static __global__ void nf4_quantize_kernel(const T *__restrict__ x, int64_t n, int blocksize, int64_t nblocks,
                                           uint8_t *__restrict__ codes, float *__restrict__ absmax) {
    const int64_t b = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (b >= nblocks) return; /* whole warps leave together */
    const int64_t begin = b * blocksize;
    const int valid = (int)min((int64_t)blocksize, n - begin);
    float m = -FLT_MAX;
    for (int i = lane; i < valid; i += 32) m = max_ftz(m, abs_ftz(to_f32(x[begin + i])));
    m = warp_max(m);
    if (valid < blocksize) m = fmaxf(m, 0.0f); /* bnb's zero padding takes part in the max */
    const float inv = rcp_ftz(m);
    for (int p = lane; 2 * p < valid; p += 32) {
        float x0 = to_f32(x[begin + 2 * p]);
        float x1 = 2 * p + 1 < valid ? to_f32(x[begin + 2 * p + 1]) : 0.0f;
        codes[begin / 2 + p] = (uint8_t)(nf4_code(mul_ftz(x0, inv)) << 4 | nf4_code(mul_ftz(x1, inv)));
    }
    if (lane == 0) absmax[b] = m;
}

/* ---- double quant ---- */

static __global__ void nf4_mean_partial_kernel(const float *__restrict__ a, int64_t n, int64_t nchunks,
                                               double *__restrict__ partial) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nchunks) return;
    const int64_t begin = c * QLT_NF4_MEAN_CHUNK, end = min(begin + QLT_NF4_MEAN_CHUNK, n);
    double s = 0.0;
    for (int64_t i = begin; i < end; i++) s = __dadd_rn(s, (double)a[i]);
    partial[c] = s;
}

static __global__ void nf4_mean_final_kernel(const double *__restrict__ partial, int64_t nchunks, int64_t n,
                                             int use_override, float override_value, float *__restrict__ offset) {
    if (use_override) {
        *offset = override_value;
        return;
    }
    double total = 0.0;
    for (int64_t c = 0; c < nchunks; c++) total = __dadd_rn(total, partial[c]);
    *offset = __double2float_rn(__ddiv_rn(total, (double)n));
}

static __global__ void nf4_nested_kernel(const float *__restrict__ absmax, int64_t nblocks,
                                         const float *__restrict__ offset_ptr, const float *__restrict__ map,
                                         uint8_t *__restrict__ absmax_q, float *__restrict__ nested_absmax,
                                         int64_t nested_nblocks) {
    __shared__ float code[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) code[i] = map[i];
    __syncthreads();
    const int64_t b = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (b >= nested_nblocks) return;
    const float offset = *offset_ptr;
    const int64_t begin = b * QLT_NF4_NESTED_BLOCKSIZE;
    const int valid = (int)min((int64_t)QLT_NF4_NESTED_BLOCKSIZE, nblocks - begin);
    float v[QLT_NF4_NESTED_BLOCKSIZE / 32];
    float m = -FLT_MAX;
#pragma unroll
    for (int k = 0; k < QLT_NF4_NESTED_BLOCKSIZE / 32; k++) {
        int i = lane + 32 * k;
        v[k] = i < valid ? __fsub_rn(absmax[begin + i], offset) : 0.0f;
        if (i < valid) m = max_ftz(m, abs_ftz(v[k]));
    }
    m = warp_max(m);
    if (valid < QLT_NF4_NESTED_BLOCKSIZE) m = fmaxf(m, 0.0f);
    const float inv = rcp_ftz(m);
#pragma unroll
    for (int k = 0; k < QLT_NF4_NESTED_BLOCKSIZE / 32; k++) {
        int i = lane + 32 * k;
        if (i < valid) absmax_q[begin + i] = (uint8_t)dynamic_code(code, mul_ftz(v[k], inv));
    }
    if (lane == 0) nested_absmax[b] = m;
}

/* ---- dequantize: 8 values a chunk (4 code bytes: one 4-byte load, one 16-byte store), 2 chunks a thread ---- */

__constant__ float nf4_codebook_const[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f,
};

struct nf4_dq_args {
    const uint8_t *codes;
    const float *absmax;        /* plain */
    const uint8_t *absmax_q;    /* nested */
    const float *nested_absmax;
    const float *nested_code;
    float offset;
    int log2_blocksize;
    int64_t n;
    int64_t cols, ld; /* output rows of `cols` values `ld` apart (ld == cols: contiguous); cols % 8 == 0 */
};

/* Where value e of the flattened weight goes in the (possibly row-strided) output. */
static __device__ __forceinline__ int64_t out_index(const nf4_dq_args &a, int64_t e) {
    if (a.ld == a.cols) return e;
    int64_t row = e / a.cols;
    return row * a.ld + (e - row * a.cols);
}

template <bool NESTED>
static __device__ __forceinline__ float block_scale(const nf4_dq_args &a, int64_t blk) {
    if (NESTED)
        return __fadd_rn(mul_ftz(__ldg(a.nested_code + __ldg(a.absmax_q + blk)),
                                 __ldg(a.nested_absmax + blk / QLT_NF4_NESTED_BLOCKSIZE)),
                         a.offset);
    return __ldg(a.absmax + blk);
}

static __device__ __forceinline__ void store8(float *out, const float *v) {
    reinterpret_cast<float4 *>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4 *>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
static __device__ __forceinline__ uint32_t pack2(__nv_bfloat16 *, float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b); /* .x = a (low half, lower address) */
    return *reinterpret_cast<uint32_t *>(&h);
}
static __device__ __forceinline__ uint32_t pack2(__half *, float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}
static __device__ __forceinline__ void store8(__nv_bfloat16 *out, const float *v) {
    *reinterpret_cast<uint4 *>(out) = make_uint4(pack2(out, v[0], v[1]), pack2(out, v[2], v[3]),
                                                 pack2(out, v[4], v[5]), pack2(out, v[6], v[7]));
}
static __device__ __forceinline__ void store8(__half *out, const float *v) {
    *reinterpret_cast<uint4 *>(out) = make_uint4(pack2(out, v[0], v[1]), pack2(out, v[2], v[3]),
                                                 pack2(out, v[4], v[5]), pack2(out, v[6], v[7]));
}
static __device__ __forceinline__ void store1(float *out, float v) { *out = v; }
static __device__ __forceinline__ void store1(__nv_bfloat16 *out, float v) { *out = __float2bfloat16_rn(v); }
static __device__ __forceinline__ void store1(__half *out, float v) { *out = __float2half_rn(v); }

/* Chunk c (values [8c, 8c+8)) of the output, the code bytes [4c, 4c+4). */
template <typename T, bool NESTED>
static __device__ __forceinline__ void dequantize_chunk(const nf4_dq_args &a, T *__restrict__ out, const float *lut,
                                                        int64_t c, uint32_t w, float s) {
    const int64_t e = c * 8;
    if (e + 8 <= a.n) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t byte = (w >> (8 * j)) & 0xffu;
            v[2 * j] = mul_ftz(lut[byte >> 4], s);
            v[2 * j + 1] = mul_ftz(lut[byte & 0x0f], s);
        }
        store8(out + out_index(a, e), v); /* 8 values never straddle a row (cols % 8 == 0) */
    } else {
        for (int64_t i = e; i < a.n; i++) {
            uint8_t byte = a.codes[i / 2];
            store1(out + out_index(a, i), mul_ftz(lut[(i & 1) ? (byte & 0x0f) : (byte >> 4)], s));
        }
    }
}

/* 16-bit outputs: thread t handles chunks t and t + T (T = threads in the grid): a warp reads 128
 * contiguous code bytes and writes 512 contiguous bf16 / fp16 bytes per chunk; both chunks' loads (codes and
 * block scales) are issued before either is stored, so twice the bytes are in flight. fp32 outputs use
 * nf4_dequantize_f32_kernel below. 8 values never straddle a quantization block. */
template <typename T, bool NESTED>
static __global__ void __launch_bounds__(256) nf4_dequantize_kernel(nf4_dq_args a, T *__restrict__ out) {
    __shared__ float lut[16];
    if (threadIdx.x < 16) lut[threadIdx.x] = nf4_codebook_const[threadIdx.x];
    __syncthreads();
    const int64_t chunks = (a.n + 7) / 8;
    const int64_t total = (int64_t)gridDim.x * blockDim.x;
    const int64_t c0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, c1 = c0 + total;
    const uint32_t *words = reinterpret_cast<const uint32_t *>(a.codes);
    const bool has0 = c0 < chunks, has1 = c1 < chunks;
    /* the last chunk may be partial: read it byte by byte in dequantize_chunk, not as a whole word */
    uint32_t w0 = has0 && c0 * 8 + 8 <= a.n ? __ldg(words + c0) : 0u;
    uint32_t w1 = has1 && c1 * 8 + 8 <= a.n ? __ldg(words + c1) : 0u;
    float s0 = has0 ? block_scale<NESTED>(a, (c0 * 8) >> a.log2_blocksize) : 0.0f;
    float s1 = has1 ? block_scale<NESTED>(a, (c1 * 8) >> a.log2_blocksize) : 0.0f;
    if (has0) dequantize_chunk<T, NESTED>(a, out, lut, c0, w0, s0);
    if (has1) dequantize_chunk<T, NESTED>(a, out, lut, c1, w1, s1);
}

/* fp32 outputs: one chunk of 8 values a thread, written straight (their stores alone keep enough bytes in
 * flight; the two-chunk structure above would slow them down). */
template <bool NESTED>
static __global__ void __launch_bounds__(256) nf4_dequantize_f32_kernel(nf4_dq_args a, float *__restrict__ out) {
    __shared__ float lut[16];
    if (threadIdx.x < 16) lut[threadIdx.x] = nf4_codebook_const[threadIdx.x];
    __syncthreads();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t e = t * 8;
    if (e >= a.n) return;
    const float s = block_scale<NESTED>(a, e >> a.log2_blocksize);
    const uint32_t w = e + 8 <= a.n ? __ldg(reinterpret_cast<const uint32_t *>(a.codes) + t) : 0u;
    dequantize_chunk<float, NESTED>(a, out, lut, t, w, s);
}

/* Unaligned pointers: one thread per value. */
template <typename T, bool NESTED>
static __global__ void nf4_dequantize_scalar_kernel(nf4_dq_args a, T *__restrict__ out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.n) return;
    const float s = block_scale<NESTED>(a, i >> a.log2_blocksize);
    uint8_t byte = a.codes[i / 2];
    store1(out + out_index(a, i), mul_ftz(nf4_codebook_const[(i & 1) ? (byte & 0x0f) : (byte >> 4)], s));
}

static __global__ void nf4_rcp_kernel(const float *__restrict__ in, float *__restrict__ out, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = rcp_ftz(in[i]);
}

/* ---- launchers ---- */

static unsigned grid_for(int64_t threads, int block) { return (unsigned)((threads + block - 1) / block); }

template <typename T>
static int launch_quantize(const T *x, const qlt_nf4 *q, float *absmax, cudaStream_t stream) {
    const int block = 256;
    nf4_quantize_kernel<T><<<grid_for(q->nblocks * 32, block), block, 0, stream>>>(x, q->numel, q->blocksize,
                                                                                  q->nblocks, q->codes, absmax);
    NF4_CUDA_CHECK(cudaGetLastError());
    return 0;
}

static int launch_double_quant(qlt_nf4 *q, const float *absmax, void *workspace, const float *offset_override,
                               cudaStream_t stream) {
    const int64_t nchunks = (q->nblocks + QLT_NF4_MEAN_CHUNK - 1) / QLT_NF4_MEAN_CHUNK;
    char *ws = (char *)workspace;
    size_t absmax_bytes = ((size_t)q->nblocks * sizeof(float) + 15) & ~(size_t)15;
    double *partial = (double *)(ws + absmax_bytes);
    float *offset = (float *)(ws + absmax_bytes + (size_t)nchunks * sizeof(double));
    if (!offset_override) {
        nf4_mean_partial_kernel<<<grid_for(nchunks, 128), 128, 0, stream>>>(absmax, q->nblocks, nchunks, partial);
        NF4_CUDA_CHECK(cudaGetLastError());
    }
    nf4_mean_final_kernel<<<1, 1, 0, stream>>>(partial, nchunks, q->nblocks, offset_override != NULL,
                                               offset_override ? *offset_override : 0.0f, offset);
    NF4_CUDA_CHECK(cudaGetLastError());
    const int block = 256;
    nf4_nested_kernel<<<grid_for(q->nested_nblocks * 32, block), block, 0, stream>>>(
        absmax, q->nblocks, offset, q->nested_code, q->absmax_q, q->nested_absmax, q->nested_nblocks);
    NF4_CUDA_CHECK(cudaGetLastError());
    NF4_CUDA_CHECK(cudaMemcpyAsync(&q->offset, offset, sizeof(float), cudaMemcpyDeviceToHost, stream));
    NF4_CUDA_CHECK(cudaStreamSynchronize(stream));
    return 0;
}

template <typename T, bool NESTED>
static int launch_dequantize(const nf4_dq_args &a, T *out, cudaStream_t stream) {
    const int block = 256;
    const bool aligned = ((uintptr_t)a.codes % 4 == 0) && ((uintptr_t)out % 16 == 0);
    if (!aligned)
        nf4_dequantize_scalar_kernel<T, NESTED><<<grid_for(a.n, block), block, 0, stream>>>(a, out);
    else if constexpr (sizeof(T) == 4)
        nf4_dequantize_f32_kernel<NESTED><<<grid_for((a.n + 7) / 8, block), block, 0, stream>>>(a, out);
    else
        nf4_dequantize_kernel<T, NESTED><<<grid_for(((a.n + 7) / 8 + 1) / 2, block), block, 0, stream>>>(a, out);
    NF4_CUDA_CHECK(cudaGetLastError());
    return 0;
}

/* ---- entry points ---- */

extern "C" int qlt_cuda_nf4_alloc(qlt_nf4 *q, int64_t numel, int blocksize, int double_quant) {
    qlt_nf4 h;
    QLT_TRY(qlt_nf4_alloc_host(&h, numel, blocksize, double_quant)); /* sizes + the two maps */
    *q = h;
    q->codes = NULL;
    q->code = NULL;
    q->absmax = NULL;
    q->absmax_q = NULL;
    q->nested_absmax = NULL;
    q->nested_code = NULL;
    int rc = 0;
#define NF4_ALLOC(field, bytes)                                                                           \
    if (rc == 0 && cudaMalloc((void **)&q->field, (bytes)) != cudaSuccess)                             \
        rc = qlt_fail("CUDA: out of device memory allocating %zu bytes of NF4 %s", (size_t)(bytes), #field);
    NF4_ALLOC(codes, (size_t)(numel + 1) / 2)
    NF4_ALLOC(code, 16 * sizeof(float))
    if (double_quant) {
        NF4_ALLOC(absmax_q, (size_t)h.nblocks)
        NF4_ALLOC(nested_absmax, (size_t)h.nested_nblocks * sizeof(float))
        NF4_ALLOC(nested_code, 256 * sizeof(float))
    } else {
        NF4_ALLOC(absmax, (size_t)h.nblocks * sizeof(float))
    }
#undef NF4_ALLOC
    if (rc == 0 && cudaMemcpy(q->code, h.code, 16 * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        rc = qlt_fail("CUDA: uploading the NF4 codebook failed");
    if (rc == 0 && double_quant &&
        cudaMemcpy(q->nested_code, h.nested_code, 256 * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        rc = qlt_fail("CUDA: uploading the dynamic map failed");
    qlt_nf4_free_host(&h);
    if (rc) qlt_cuda_nf4_free(q);
    return rc;
}

extern "C" void qlt_cuda_nf4_free(qlt_nf4 *q) {
    cudaFree(q->codes);
    cudaFree(q->code);
    cudaFree(q->absmax);
    cudaFree(q->absmax_q);
    cudaFree(q->nested_absmax);
    cudaFree(q->nested_code);
    q->codes = q->absmax_q = NULL;
    q->code = q->absmax = q->nested_absmax = q->nested_code = NULL;
}

static int copy_nf4(qlt_nf4 *dst, const qlt_nf4 *src, cudaMemcpyKind kind) {
    NF4_CUDA_CHECK(cudaMemcpy(dst->codes, src->codes, (size_t)(src->numel + 1) / 2, kind));
    NF4_CUDA_CHECK(cudaMemcpy(dst->code, src->code, 16 * sizeof(float), kind));
    if (src->double_quant) {
        NF4_CUDA_CHECK(cudaMemcpy(dst->absmax_q, src->absmax_q, (size_t)src->nblocks, kind));
        NF4_CUDA_CHECK(
            cudaMemcpy(dst->nested_absmax, src->nested_absmax, (size_t)src->nested_nblocks * sizeof(float), kind));
        NF4_CUDA_CHECK(cudaMemcpy(dst->nested_code, src->nested_code, 256 * sizeof(float), kind));
    } else {
        NF4_CUDA_CHECK(cudaMemcpy(dst->absmax, src->absmax, (size_t)src->nblocks * sizeof(float), kind));
    }
    dst->offset = src->offset;
    return 0;
}

extern "C" int qlt_cuda_nf4_upload(qlt_nf4 *dev, const qlt_nf4 *host) {
    QLT_TRY(qlt_cuda_nf4_alloc(dev, host->numel, host->blocksize, host->double_quant));
    if (copy_nf4(dev, host, cudaMemcpyHostToDevice)) {
        qlt_cuda_nf4_free(dev);
        return -1;
    }
    return 0;
}

extern "C" int qlt_cuda_nf4_download(qlt_nf4 *host, const qlt_nf4 *dev) {
    QLT_ASSERT(host->numel == dev->numel && host->blocksize == dev->blocksize &&
               host->double_quant == dev->double_quant);
    return copy_nf4(host, dev, cudaMemcpyDeviceToHost);
}

extern "C" size_t qlt_cuda_nf4_quantize_workspace(int64_t numel, int blocksize, int double_quant) {
    if (!double_quant) return 0;
    int64_t nblocks = (numel + blocksize - 1) / blocksize;
    int64_t nchunks = (nblocks + QLT_NF4_MEAN_CHUNK - 1) / QLT_NF4_MEAN_CHUNK;
    return (((size_t)nblocks * sizeof(float) + 15) & ~(size_t)15) + (size_t)nchunks * sizeof(double) + 16;
}

extern "C" int qlt_cuda_nf4_quantize(qlt_nf4 *q, const void *x, qlt_dtype dtype, void *workspace,
                                     const float *offset_override, void *stream_) {
    cudaStream_t stream = (cudaStream_t)stream_;
    QLT_TRY(qlt_nf4_check_blocksize(q->blocksize));
    QLT_ASSERT(!q->double_quant || workspace);
    float *absmax = q->double_quant ? (float *)workspace : q->absmax;
    int rc;
    switch (dtype) {
    case QLT_DTYPE_F32: rc = launch_quantize((const float *)x, q, absmax, stream); break;
    case QLT_DTYPE_F16: rc = launch_quantize((const __half *)x, q, absmax, stream); break;
    case QLT_DTYPE_BF16: rc = launch_quantize((const __nv_bfloat16 *)x, q, absmax, stream); break;
    default: return qlt_fail("NF4: cannot quantize %s values (F32, F16 or BF16 only)", qlt_dtype_name(dtype));
    }
    if (rc) return rc;
    if (q->double_quant) return launch_double_quant(q, absmax, workspace, offset_override, stream);
    return 0;
}

extern "C" int qlt_cuda_nf4_dequantize(const qlt_nf4 *q, void *out, qlt_dtype out_dtype, void *stream_) {
    return qlt_cuda_nf4_dequantize_rows(q, out, out_dtype, q->numel, q->numel, stream_);
}

extern "C" int qlt_cuda_nf4_dequantize_rows(const qlt_nf4 *q, void *out, qlt_dtype out_dtype, int64_t cols, int64_t ld,
                                            void *stream_) {
    cudaStream_t stream = (cudaStream_t)stream_;
    QLT_ASSERT(q->blocksize >= 32 && (q->blocksize & (q->blocksize - 1)) == 0);
    QLT_ASSERT(cols > 0 && ld >= cols && q->numel % cols == 0 && (ld == cols || cols % 8 == 0));
    nf4_dq_args a;
    a.codes = q->codes;
    a.absmax = q->absmax;
    a.absmax_q = q->absmax_q;
    a.nested_absmax = q->nested_absmax;
    a.nested_code = q->nested_code;
    a.offset = q->offset;
    a.log2_blocksize = __builtin_ctz((unsigned)q->blocksize);
    a.n = q->numel;
    a.cols = cols;
    a.ld = ld;
    const bool nested = q->double_quant != 0;
    switch (out_dtype) {
    case QLT_DTYPE_F32:
        return nested ? launch_dequantize<float, true>(a, (float *)out, stream)
                      : launch_dequantize<float, false>(a, (float *)out, stream);
    case QLT_DTYPE_BF16:
        return nested ? launch_dequantize<__nv_bfloat16, true>(a, (__nv_bfloat16 *)out, stream)
                      : launch_dequantize<__nv_bfloat16, false>(a, (__nv_bfloat16 *)out, stream);
    case QLT_DTYPE_F16:
        return nested ? launch_dequantize<__half, true>(a, (__half *)out, stream)
                      : launch_dequantize<__half, false>(a, (__half *)out, stream);
    default: return qlt_fail("NF4: cannot dequantize to %s (F32, BF16 or F16 only)", qlt_dtype_name(out_dtype));
    }
}

extern "C" int qlt_cuda_nf4_rcp(float *out, const float *in, int64_t n, void *stream) {
    nf4_rcp_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(in, out, n);
    NF4_CUDA_CHECK(cudaGetLastError());
    return 0;
}
