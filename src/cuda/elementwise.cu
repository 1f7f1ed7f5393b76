/* elementwise.cu: the memory-bound ops: embed, RoPE, SwiGLU, add, copy, dropout, zero, and the small
 * conversions other files use (fp32/fp16 -> bf16, bf16 hi/lo split, bias add). bf16 in and out, fp32
 * math; one thread per element (or element pair) with grid-stride loops. */
#include "common/counter_hash.h"
#include "cuda/cuda_common.h"

/* ---- embed ---- */

static __global__ void embed_kernel(bf16 *x, const int32_t *ids, const bf16 *table, int64_t n, int64_t d) {
    int64_t t = blockIdx.x;
    const bf16 *src = table + (int64_t)ids[t] * d;
    bf16 *dst = x + t * d;
    if ((d & 7) == 0) {
        const uint4 *s4 = (const uint4 *)src;
        uint4 *d4 = (uint4 *)dst;
        for (int64_t i = threadIdx.x; i < d / 8; i += blockDim.x) d4[i] = s4[i];
    } else {
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = src[i];
    }
}

void qlt_cuda_embed(qlt_backend *be, void *x, const int32_t *ids, const qlt_weight *emb, int64_t n) {
    if (n <= 0) return;
    QLT_ASSERT(emb->format == QLT_WFORMAT_BF16);
    cudaStream_t s = cuda_impl_of(be)->stream;
    embed_kernel<<<(unsigned)n, 128, 0, s>>>((bf16 *)x, ids, (const bf16 *)emb->data, n, emb->cols);
    CUDA_CHECK_LAUNCH();
}

/* ---- RoPE (HF rotate-half: i pairs with i + half); angle = float(pos) * inv_freq[i] in fp32 ---- */

static __global__ void rope_kernel(bf16 *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                                   int head_dim, int inverse) {
    int half = head_dim / 2;
    int64_t total = n * half;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = idx / half;
        int i = (int)(idx - t * half);
        float angle = __fmul_rn((float)pos[t], inv_freq[i]);
        float sn, cs;
        sincosf(angle, &sn, &cs);
        if (inverse) sn = -sn;
        bf16 *row = x + t * (int64_t)heads * head_dim;
        for (int h = 0; h < heads; h++) {
            bf16 *xh = row + (int64_t)h * head_dim;
            float a = __bfloat162float(xh[i]), b = __bfloat162float(xh[i + half]);
            xh[i] = __float2bfloat16(a * cs - b * sn);
            xh[i + half] = __float2bfloat16(b * cs + a * sn);
        }
    }
}

/* Four pairs a thread (8-byte loads and stores of i..i+3 and i+half..i+half+3) when half % 4 == 0 and x is
 * 8-byte aligned, for heads_per of the token's heads (the angles computed once for them); the same angle and
 * arithmetic per element as rope_kernel. Splitting the heads over threads keeps enough loads in flight at
 * micro-batch 1 (one thread for all 28 heads of a token left 32K threads for the GPU). */
static __global__ void rope4_kernel(bf16 *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                                    int head_dim, int inverse, int heads_per) {
    const int half = head_dim / 2, quads = half / 4, groups = (heads + heads_per - 1) / heads_per;
    const int64_t total = n * quads * groups;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t tq = idx / groups;
        const int group = (int)(idx - tq * groups);
        const int64_t t = tq / quads;
        const int i = (int)(tq - t * quads) * 4;
        float sn[4], cs[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            sincosf(__fmul_rn((float)pos[t], inv_freq[i + e]), &sn[e], &cs[e]);
            if (inverse) sn[e] = -sn[e];
        }
        bf16 *row = x + t * (int64_t)heads * head_dim;
        const int h_end = min(heads, (group + 1) * heads_per);
        for (int h = group * heads_per; h < h_end; h++) {
            bf16 *xh = row + (int64_t)h * head_dim;
            uint2 ra = *(const uint2 *)(xh + i), rb = *(const uint2 *)(xh + i + half);
            const __nv_bfloat162 *pa = (const __nv_bfloat162 *)&ra, *pb = (const __nv_bfloat162 *)&rb;
            float a[4], b[4];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float2 fa = __bfloat1622float2(pa[e]), fb = __bfloat1622float2(pb[e]);
                a[2 * e] = fa.x, a[2 * e + 1] = fa.y, b[2 * e] = fb.x, b[2 * e + 1] = fb.y;
            }
            __nv_bfloat162 *oa = (__nv_bfloat162 *)&ra, *ob = (__nv_bfloat162 *)&rb;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                oa[e] = __floats2bfloat162_rn(a[2 * e] * cs[2 * e] - b[2 * e] * sn[2 * e],
                                              a[2 * e + 1] * cs[2 * e + 1] - b[2 * e + 1] * sn[2 * e + 1]);
                ob[e] = __floats2bfloat162_rn(b[2 * e] * cs[2 * e] + a[2 * e] * sn[2 * e],
                                              b[2 * e + 1] * cs[2 * e + 1] + a[2 * e + 1] * sn[2 * e + 1]);
            }
            *(uint2 *)(xh + i) = ra;
            *(uint2 *)(xh + i + half) = rb;
        }
    }
}

void qlt_cuda_rope(qlt_backend *be, void *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                   int head_dim, int inverse) {
    if (n <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    if ((head_dim / 2) % 4 == 0 && ((uintptr_t)x & 7) == 0) {
        const int heads_per = 4, groups = (heads + heads_per - 1) / heads_per;
        rope4_kernel<<<qlt_grid(n * (head_dim / 8) * groups, 256), 256, 0, s>>>((bf16 *)x, pos, inv_freq, n, heads,
                                                                                 head_dim, inverse, heads_per);
    } else {
        rope_kernel<<<qlt_grid(n * (head_dim / 2), 256), 256, 0, s>>>((bf16 *)x, pos, inv_freq, n, heads, head_dim,
                                                                       inverse);
    }
    CUDA_CHECK_LAUNCH();
}

/* ---- SwiGLU on the stacked gate+up output gu [N, 2I]: h = silu(g) * u; dsilu/dg = sig (1 + g (1 - sig)).
 * Eight elements a thread (16-byte loads and stores) when I % 8 == 0 and the buffers are aligned. ---- */

static __device__ __forceinline__ void swiglu_fwd1(float g, float u, float *h) {
    float sig = 1.0f / (1.0f + expf(-g));
    *h = g * sig * u;
}

static __device__ __forceinline__ void swiglu_bwd1(float g, float u, float d, float *dg, float *du) {
    float sig = 1.0f / (1.0f + expf(-g));
    *du = d * g * sig;
    *dg = d * u * sig * (1.0f + g * (1.0f - sig));
}

/* VEC: i counts groups of 8 (inter8 = I / 8); else single elements (inter8 = I) */
template <bool VEC>
static __global__ void swiglu_fwd_kernel(bf16 *h, const bf16 *gu, int64_t n, int64_t inter8) {
    int64_t total = n * inter8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / inter8, j = i - t * inter8;
        if (VEC) {
            const uint4 *row = (const uint4 *)gu + t * 2 * inter8;
            float g[8], u[8], o[8];
            qlt_bf16x8_unpack(row[j], g);
            qlt_bf16x8_unpack(row[inter8 + j], u);
#pragma unroll
            for (int e = 0; e < 8; e++) swiglu_fwd1(g[e], u[e], &o[e]);
            ((uint4 *)h)[i] = qlt_bf16x8_pack(o);
        } else {
            const bf16 *row = gu + t * 2 * inter8;
            float o;
            swiglu_fwd1(__bfloat162float(row[j]), __bfloat162float(row[inter8 + j]), &o);
            h[i] = __float2bfloat16(o);
        }
    }
}

/* each thread reads its gate, up and dh before writing dgate, dup: dgu may be gu */
template <bool VEC>
static __global__ void swiglu_bwd_kernel(bf16 *dgu, const bf16 *dh, const bf16 *gu, int64_t n, int64_t inter8) {
    int64_t total = n * inter8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / inter8, j = i - t * inter8;
        if (VEC) {
            const uint4 *row = (const uint4 *)gu + t * 2 * inter8;
            uint4 *drow = (uint4 *)dgu + t * 2 * inter8;
            float g[8], u[8], d[8], dg[8], du[8];
            qlt_bf16x8_unpack(row[j], g);
            qlt_bf16x8_unpack(row[inter8 + j], u);
            qlt_bf16x8_unpack(((const uint4 *)dh)[i], d);
#pragma unroll
            for (int e = 0; e < 8; e++) swiglu_bwd1(g[e], u[e], d[e], &dg[e], &du[e]);
            drow[j] = qlt_bf16x8_pack(dg);
            drow[inter8 + j] = qlt_bf16x8_pack(du);
        } else {
            const bf16 *row = gu + t * 2 * inter8;
            bf16 *drow = dgu + t * 2 * inter8;
            float dg, du;
            swiglu_bwd1(__bfloat162float(row[j]), __bfloat162float(row[inter8 + j]), __bfloat162float(dh[i]), &dg, &du);
            drow[j] = __float2bfloat16(dg);
            drow[inter8 + j] = __float2bfloat16(du);
        }
    }
}

static bool swiglu_vec_ok(int64_t inter, const void *a, const void *b, const void *c) {
    return (inter & 7) == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

void qlt_cuda_swiglu_fwd(qlt_backend *be, void *h, const void *gu, int64_t n, int64_t inter) {
    if (n <= 0 || inter <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    if (swiglu_vec_ok(inter, h, gu, gu))
        swiglu_fwd_kernel<true><<<qlt_grid(n * inter / 8, 256), 256, 0, s>>>((bf16 *)h, (const bf16 *)gu, n, inter / 8);
    else
        swiglu_fwd_kernel<false><<<qlt_grid(n * inter, 256), 256, 0, s>>>((bf16 *)h, (const bf16 *)gu, n, inter);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_swiglu_bwd(qlt_backend *be, void *dgu, const void *dh, const void *gu, int64_t n, int64_t inter) {
    if (n <= 0 || inter <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    if (swiglu_vec_ok(inter, dgu, dh, gu))
        swiglu_bwd_kernel<true><<<qlt_grid(n * inter / 8, 256), 256, 0, s>>>((bf16 *)dgu, (const bf16 *)dh,
                                                                            (const bf16 *)gu, n, inter / 8);
    else
        swiglu_bwd_kernel<false><<<qlt_grid(n * inter, 256), 256, 0, s>>>((bf16 *)dgu, (const bf16 *)dh,
                                                                          (const bf16 *)gu, n, inter);
    CUDA_CHECK_LAUNCH();
}

/* ---- add / copy / zero ---- */

static __global__ void add_kernel(bf16 *out, const bf16 *a, const bf16 *b, int64_t count) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

/* 8 elements per thread when every pointer is 16-byte aligned */
static __global__ void add8_kernel(uint4 *out, const uint4 *a, const uint4 *b, int64_t count8) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count8; i += (int64_t)gridDim.x * blockDim.x) {
        uint4 va = a[i], vb = b[i], vo;
        const __nv_bfloat162 *pa = (const __nv_bfloat162 *)&va, *pb = (const __nv_bfloat162 *)&vb;
        __nv_bfloat162 *po = (__nv_bfloat162 *)&vo;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
            po[j] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
        }
        out[i] = vo;
    }
}

void qlt_cuda_add(qlt_backend *be, void *out, const void *a, const void *b, int64_t count) {
    if (count <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    if ((count & 7) == 0 && (((uintptr_t)out | (uintptr_t)a | (uintptr_t)b) & 15) == 0)
        add8_kernel<<<qlt_grid(count / 8, 256), 256, 0, s>>>((uint4 *)out, (const uint4 *)a, (const uint4 *)b,
                                                             count / 8);
    else
        add_kernel<<<qlt_grid(count, 256), 256, 0, s>>>((bf16 *)out, (const bf16 *)a, (const bf16 *)b, count);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_copy(qlt_backend *be, void *out, const void *x, int64_t count) {
    if (count <= 0 || out == x) return;
    CUDA_CHECK(cudaMemcpyAsync(out, x, sizeof(bf16) * (size_t)count, cudaMemcpyDeviceToDevice,
                               cuda_impl_of(be)->stream));
}

/* dst [rows, cols] (row stride ldd) = src [rows, cols] (row stride lds), bf16: the [x | T3] operands of the
 * folded GEMMs. 16 bytes a thread when every stride and pointer allows it (cudaMemcpy2DAsync moved these
 * rows at ~1.6 TB/s on the H100, this at ~2.7). */
template <typename T>
static __global__ void copy_rows_kernel(T *dst, int64_t ldd, const T *src, int64_t lds, int64_t rows, int64_t cols) {
    const int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / cols, c = i - row * cols;
        dst[row * ldd + c] = src[row * lds + c];
    }
}

void qlt_cuda_copy_rows(cudaStream_t s, bf16 *dst, int64_t ldd, const bf16 *src, int64_t lds, int64_t rows,
                        int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    if (((cols | ldd | lds) & 7) == 0 && (((uintptr_t)dst | (uintptr_t)src) & 15) == 0)
        copy_rows_kernel<uint4><<<qlt_grid(rows * cols / 8, 256), 256, 0, s>>>((uint4 *)dst, ldd / 8, (const uint4 *)src,
                                                                              lds / 8, rows, cols / 8);
    else
        copy_rows_kernel<bf16><<<qlt_grid(rows * cols, 256), 256, 0, s>>>(dst, ldd, src, lds, rows, cols);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_zero(qlt_backend *be, void *p, size_t bytes) {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_impl_of(be)->stream));
}

/* ---- dropout: the keep-mask of common/counter_hash.h, shared with the CPU reference ---- */

static __global__ void dropout_kernel(bf16 *out, const bf16 *x, int64_t count, float p, float inv_keep,
                                      const uint64_t *step_seed, uint64_t salt) {
    const uint64_t seed = qlt_dropout_seed(*step_seed, salt); /* the step's seed lives in device memory */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        float v = __bfloat162float(x[i]);
        out[i] = __float2bfloat16(qlt_dropout_keep(seed, (uint64_t)i, p) ? v * inv_keep : 0.0f);
    }
}

void qlt_cuda_dropout(qlt_backend *be, void *out, const void *x, int64_t count, float p, const uint64_t *seed,
                      uint64_t salt) {
    if (count <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    float inv_keep = 1.0f / (1.0f - p);
    dropout_kernel<<<qlt_grid(count, 256), 256, 0, s>>>((bf16 *)out, (const bf16 *)x, count, p, inv_keep, seed, salt);
    CUDA_CHECK_LAUNCH();
}

/* ---- random fill (benchmarks): bf16 values uniform in [-1, 1) from a counter hash ---- */

static __global__ void fill_random_kernel(bf16 *out, int64_t count, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        out[i] = __float2bfloat16((float)(qlt_counter_hash(seed, (uint64_t)i) >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
}

void qlt_cuda_fill_random_bf16(cudaStream_t s, bf16 *out, int64_t count, uint64_t seed) {
    fill_random_kernel<<<qlt_grid(count, 256), 256, 0, s>>>(out, count, seed);
    CUDA_CHECK_LAUNCH();
}

/* ---- conversions ---- */

static __global__ void f32_to_bf16_kernel(bf16 *out, const float *x, int64_t count) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(x[i]);
}

static __global__ void f16_to_bf16_kernel(bf16 *out, const __half *x, int64_t count) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(__half2float(x[i]));
}

static __global__ void bias_add_kernel(bf16 *y, const float *bias, int64_t n, int64_t rows) {
    int64_t total = n * rows;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(__bfloat162float(y[i]) + bias[i % rows]);
}

void qlt_cuda_f32_to_bf16(cudaStream_t s, bf16 *out, const float *x, int64_t count) {
    if (count <= 0) return;
    f32_to_bf16_kernel<<<qlt_grid(count, 256), 256, 0, s>>>(out, x, count);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_f16_to_bf16(cudaStream_t s, bf16 *out, const __half *x, int64_t count) {
    if (count <= 0) return;
    f16_to_bf16_kernel<<<qlt_grid(count, 256), 256, 0, s>>>(out, x, count);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_bias_add(cudaStream_t s, bf16 *y, const float *bias, int64_t n, int64_t rows) {
    if (n <= 0) return;
    bias_add_kernel<<<qlt_grid(n * rows, 256), 256, 0, s>>>(y, bias, n, rows);
    CUDA_CHECK_LAUNCH();
}
