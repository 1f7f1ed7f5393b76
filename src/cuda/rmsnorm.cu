/* rmsnorm.cu: RMSNorm forward and backward, one warp per row (rows are hidden states, d = hidden, or
 * single heads for Qwen3's q/k norms, d = head_dim) or one block per wide row, and its fusions with
 * neighbours: the residual add before it (add_rmsnorm: the sum is written and normalized in one pass) and,
 * for Qwen3's per-head q/k norms, the RoPE after it (head_norm_rope, forward and backward). fp32 math;
 * 16-byte loads when d % 8 == 0, and then the row held in registers between the two passes (d <= 2048 by
 * one warp, d <= 4096 by a block of four warps; wider rows stream).
 * fwd: y = x * r * w, r = rsqrt(mean(x^2) + eps) saved.  bwd: dx = beta dx + r w dy - x r^3/d sum(w dy x). */
#include "cuda/cuda_common.h"

#define RMS_WARPS 4

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ void load8(const bf16 *p, float f[8]) { qlt_bf16x8_unpack(*(const uint4 *)p, f); }

static __device__ __forceinline__ void store8(bf16 *p, const float f[8]) { *(uint4 *)p = qlt_bf16x8_pack(f); }

/* ADD: the row is first formed as sum = bf16(x + x2) (written out), as the unfused add would round it. */
template <bool VEC, bool ADD>
static __global__ void rmsnorm_fwd_kernel(bf16 *y, float *rstd, const bf16 *x, const bf16 *x2, bf16 *sum,
                                          const float *w, int64_t n, int64_t d, float eps) {
    int64_t row = (int64_t)blockIdx.x * RMS_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= n) return;
    const bf16 *xr = x + row * d;
    bf16 *yr = y + row * d;
    float ss = 0;
    if (VEC) {
        for (int64_t j = lane * 8; j < d; j += 256) {
            float f[8];
            load8(xr + j, f);
            if (ADD) {
                float f2[8];
                load8(x2 + row * d + j, f2);
#pragma unroll
                for (int e = 0; e < 8; e++) f[e] += f2[e];
                store8(sum + row * d + j, f);
                load8(sum + row * d + j, f); /* the rounded sum, as the second pass reads it */
            }
#pragma unroll
            for (int e = 0; e < 8; e++) ss += f[e] * f[e];
        }
    } else {
        for (int64_t j = lane; j < d; j += 32) {
            float v = __bfloat162float(xr[j]);
            if (ADD) {
                bf16 sv = __float2bfloat16(v + __bfloat162float(x2[row * d + j]));
                sum[row * d + j] = sv;
                v = __bfloat162float(sv);
            }
            ss += v * v;
        }
    }
    if (ADD) xr = sum + row * d;
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)d + eps);
    if (lane == 0) rstd[row] = r;
    if (VEC) {
        for (int64_t j = lane * 8; j < d; j += 256) {
            float f[8];
            load8(xr + j, f);
#pragma unroll
            for (int e = 0; e < 8; e++) f[e] = f[e] * r * w[j + e];
            store8(yr + j, f);
        }
    } else {
        for (int64_t j = lane; j < d; j += 32) yr[j] = __float2bfloat16(__bfloat162float(xr[j]) * r * w[j]);
    }
}

template <bool VEC>
static __global__ void rmsnorm_bwd_kernel(bf16 *dx, const bf16 *dy, const bf16 *x, const float *rstd, const float *w,
                                          int64_t n, int64_t d, float beta) {
    int64_t row = (int64_t)blockIdx.x * RMS_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= n) return;
    const bf16 *xr = x + row * d, *dyr = dy + row * d;
    bf16 *dxr = dx + row * d;
    float r = rstd[row], dot = 0;
    if (VEC) {
        for (int64_t j = lane * 8; j < d; j += 256) {
            float fx[8], fd[8];
            load8(xr + j, fx);
            load8(dyr + j, fd);
#pragma unroll
            for (int e = 0; e < 8; e++) dot += w[j + e] * fd[e] * fx[e];
        }
    } else {
        for (int64_t j = lane; j < d; j += 32) dot += w[j] * __bfloat162float(dyr[j]) * __bfloat162float(xr[j]);
    }
    dot = warp_sum(dot);
    float c = r * r * r * dot / (float)d;
    if (VEC) {
        for (int64_t j = lane * 8; j < d; j += 256) {
            float fx[8], fd[8], fo[8];
            load8(xr + j, fx);
            load8(dyr + j, fd);
            if (beta != 0.0f) load8(dxr + j, fo);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float g = r * w[j + e] * fd[e] - fx[e] * c;
                fo[e] = beta != 0.0f ? g + beta * fo[e] : g;
            }
            store8(dxr + j, fo);
        }
    } else {
        for (int64_t j = lane; j < d; j += 32) {
            float g = r * w[j] * __bfloat162float(dyr[j]) - __bfloat162float(xr[j]) * c;
            if (beta != 0.0f) g += beta * __bfloat162float(dxr[j]);
            dxr[j] = __float2bfloat16(g);
        }
    }
}

/* ---- register-resident rows (d % 8 == 0): TPR threads a row (a warp, or the block's four warps) each hold CH
 * 8-value chunks of it (j = 8 t + 8 TPR c, d <= 8 TPR CH) from one read, so the second pass reads registers,
 * not memory, and w comes as two float4. One warp holds rows up to 2048 (8 chunks a lane); past that its
 * 150-185 registers a thread left too few warps an SM to keep memory busy, so wider rows (up to 4096) are
 * held by a block, 4 chunks a thread, the warps' partial sums meeting in shared memory. Same arithmetic per
 * element, in the same order, as the streaming kernels above. ---- */

#define RMS_ROW_CH 4 /* the block-held rows' chunks a thread: d <= 8 * 32 * RMS_WARPS * RMS_ROW_CH = 4096 */

static __device__ __forceinline__ void load8w(const float *w, float f[8]) {
    const float4 a = *(const float4 *)w, b = *(const float4 *)(w + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

/* load8w that the compiler may not merge with an earlier load of the same w: keeping the first pass's w
 * values alive for the second would double the registers a block-held row needs */
static __device__ __forceinline__ void load8w_again(const float *w, float f[8]) {
    asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(f[0]), "=f"(f[1]), "=f"(f[2]), "=f"(f[3]) : "l"(w));
    asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(f[4]), "=f"(f[5]), "=f"(f[6]), "=f"(f[7]) : "l"(w + 4));
}

/* the row's sum of v over its TPR threads (every one of them gets it); part: RMS_WARPS floats of shared memory */
template <int TPR>
static __device__ __forceinline__ float row_sum(float v, float *part) {
    v = warp_sum(v);
    if (TPR == 32) return v;
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0;
#pragma unroll
    for (int i = 0; i < RMS_WARPS; i++) v += part[i];
    return v;
}

template <int CH, int TPR, bool ADD>
static __global__ void rmsnorm_fwd_reg_kernel(bf16 *y, float *rstd, const bf16 *x, const bf16 *x2, bf16 *sum,
                                              const float *w, int64_t n, int d, float eps) {
    __shared__ float part[RMS_WARPS];
    const int64_t row = (int64_t)blockIdx.x * (32 * RMS_WARPS / TPR) + threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    if (row >= n) return; /* a block-held row: the whole block */
    uint4 v[CH];
    float ss = 0;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        const int j = t * 8 + 8 * TPR * c;
        if (j < d) {
            v[c] = *(const uint4 *)(x + row * d + j);
            float f[8];
            qlt_bf16x8_unpack(v[c], f);
            if (ADD) {
                float f2[8];
                load8(x2 + row * d + j, f2);
#pragma unroll
                for (int e = 0; e < 8; e++) f[e] += f2[e];
                v[c] = qlt_bf16x8_pack(f);
                *(uint4 *)(sum + row * d + j) = v[c];
                qlt_bf16x8_unpack(v[c], f); /* the rounded sum */
            }
#pragma unroll
            for (int e = 0; e < 8; e++) ss += f[e] * f[e];
        }
    }
    const float r = rsqrtf(row_sum<TPR>(ss, part) / (float)d + eps);
    if (t == 0) rstd[row] = r;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        const int j = t * 8 + 8 * TPR * c;
        if (j < d) {
            float f[8], fw[8];
            qlt_bf16x8_unpack(v[c], f);
            load8w(w + j, fw);
#pragma unroll
            for (int e = 0; e < 8; e++) f[e] = f[e] * r * fw[e];
            store8(y + row * d + j, f);
        }
    }
}

template <int CH, int TPR>
static __global__ void rmsnorm_bwd_reg_kernel(bf16 *dx, const bf16 *dy, const bf16 *x, const float *rstd,
                                              const float *w, int64_t n, int d, float beta) {
    __shared__ float part[RMS_WARPS];
    const int64_t row = (int64_t)blockIdx.x * (32 * RMS_WARPS / TPR) + threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    if (row >= n) return; /* a block-held row: the whole block */
    uint4 vx[CH], vd[CH];
    const float r = rstd[row];
    float dot = 0;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        const int j = t * 8 + 8 * TPR * c;
        if (j < d) {
            vx[c] = *(const uint4 *)(x + row * d + j);
            vd[c] = *(const uint4 *)(dy + row * d + j);
            float fx[8], fd[8], fw[8];
            qlt_bf16x8_unpack(vx[c], fx);
            qlt_bf16x8_unpack(vd[c], fd);
            load8w(w + j, fw);
#pragma unroll
            for (int e = 0; e < 8; e++) dot += fw[e] * fd[e] * fx[e];
        }
    }
    const float cc = r * r * r * row_sum<TPR>(dot, part) / (float)d;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        const int j = t * 8 + 8 * TPR * c;
        if (j < d) {
            float fx[8], fd[8], fw[8], fo[8];
            qlt_bf16x8_unpack(vx[c], fx);
            qlt_bf16x8_unpack(vd[c], fd);
            if (TPR > 32) load8w_again(w + j, fw);
            else load8w(w + j, fw);
            if (beta != 0.0f) load8(dx + row * d + j, fo);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float g = r * fw[e] * fd[e] - fx[e] * cc;
                fo[e] = beta != 0.0f ? g + beta * fo[e] : g;
            }
            store8(dx + row * d + j, fo);
        }
    }
}

/* The one-warp register-resident kernels' chunk count for d (0: d > 2048, the row is too wide for one warp) */
static int rms_reg_chunks(int64_t d) {
    const int64_t ch = (d + 255) / 256;
    return ch <= 2 ? 2 : ch <= 4 ? 4 : ch <= 6 ? 6 : ch <= 8 ? 8 : 0;
}

/* Whether a block holds the row instead (2048 < d <= 4096) */
static bool rms_by_block(int64_t d) {
    return d > 2048 && d <= 8 * 32 * RMS_WARPS * RMS_ROW_CH;
}

#define RMS_REG_DISPATCH(CHUNKS, LAUNCH) \
    switch (CHUNKS) {                    \
    case 2: LAUNCH(2); break;            \
    case 4: LAUNCH(4); break;            \
    case 6: LAUNCH(6); break;            \
    default: LAUNCH(8); break;           \
    }

static bool rms_vec_ok(int64_t d, const void *a, const void *b, const void *c) {
    return (d & 7) == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

void qlt_cuda_rmsnorm_fwd(qlt_backend *be, void *y, float *rstd, const void *x, const float *w, int64_t n, int64_t d,
                          float eps) {
    if (n <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    unsigned grid = (unsigned)((n + RMS_WARPS - 1) / RMS_WARPS);
    const int ch = rms_reg_chunks(d);
#define RMS_FWD(CH)                                                                                          \
    rmsnorm_fwd_reg_kernel<CH, 32, false><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)x, nullptr, \
                                                                          nullptr, w, n, (int)d, eps)
    if (ch && rms_vec_ok(d, y, x, w))
        RMS_REG_DISPATCH(ch, RMS_FWD)
#undef RMS_FWD
    else if (rms_by_block(d) && rms_vec_ok(d, y, x, w) && n < INT32_MAX)
        rmsnorm_fwd_reg_kernel<RMS_ROW_CH, 32 * RMS_WARPS, false><<<(unsigned)n, 32 * RMS_WARPS, 0, s>>>(
            (bf16 *)y, rstd, (const bf16 *)x, nullptr, nullptr, w, n, (int)d, eps);
    else if (rms_vec_ok(d, y, x, x))
        rmsnorm_fwd_kernel<true, false><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)x, nullptr,
                                                                        nullptr, w, n, d, eps);
    else
        rmsnorm_fwd_kernel<false, false><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)x, nullptr,
                                                                         nullptr, w, n, d, eps);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_add_rmsnorm_fwd(qlt_backend *be, void *sum, void *y, float *rstd, const void *a, const void *b,
                              const float *w, int64_t n, int64_t d, float eps) {
    if (n <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    unsigned grid = (unsigned)((n + RMS_WARPS - 1) / RMS_WARPS);
    const int ch = rms_reg_chunks(d);
#define RMS_ADD(CH)                                                                                            \
    rmsnorm_fwd_reg_kernel<CH, 32, true><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)a,       \
                                                                         (const bf16 *)b, (bf16 *)sum, w, n, (int)d, eps)
    if (ch && rms_vec_ok(d, y, a, b) && rms_vec_ok(d, sum, w, sum))
        RMS_REG_DISPATCH(ch, RMS_ADD)
#undef RMS_ADD
    else if (rms_by_block(d) && rms_vec_ok(d, y, a, b) && rms_vec_ok(d, sum, w, sum) && n < INT32_MAX)
        rmsnorm_fwd_reg_kernel<RMS_ROW_CH, 32 * RMS_WARPS, true><<<(unsigned)n, 32 * RMS_WARPS, 0, s>>>(
            (bf16 *)y, rstd, (const bf16 *)a, (const bf16 *)b, (bf16 *)sum, w, n, (int)d, eps);
    else if (rms_vec_ok(d, y, a, b) && rms_vec_ok(d, sum, sum, sum))
        rmsnorm_fwd_kernel<true, true><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)a, (const bf16 *)b,
                                                                       (bf16 *)sum, w, n, d, eps);
    else
        rmsnorm_fwd_kernel<false, true><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)a,
                                                                        (const bf16 *)b, (bf16 *)sum, w, n, d, eps);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_rmsnorm_bwd(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd, const float *w,
                          int64_t n, int64_t d, float beta) {
    if (n <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    unsigned grid = (unsigned)((n + RMS_WARPS - 1) / RMS_WARPS);
    const int ch = rms_reg_chunks(d);
#define RMS_BWD(CH)                                                                                          \
    rmsnorm_bwd_reg_kernel<CH, 32><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x,  \
                                                                   rstd, w, n, (int)d, beta)
    if (ch && rms_vec_ok(d, dx, dy, x) && rms_vec_ok(d, w, w, w))
        RMS_REG_DISPATCH(ch, RMS_BWD)
#undef RMS_BWD
    else if (rms_by_block(d) && rms_vec_ok(d, dx, dy, x) && rms_vec_ok(d, w, w, w) && n < INT32_MAX)
        rmsnorm_bwd_reg_kernel<RMS_ROW_CH, 32 * RMS_WARPS><<<(unsigned)n, 32 * RMS_WARPS, 0, s>>>(
            (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, rstd, w, n, (int)d, beta);
    else if (rms_vec_ok(d, dx, dy, x))
        rmsnorm_bwd_kernel<true><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, rstd, w,
                                                                 n, d, beta);
    else
        rmsnorm_bwd_kernel<false><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, rstd, w,
                                                                  n, d, beta);
    CUDA_CHECK_LAUNCH();
}

/* ---- Qwen3 per-head norm + RoPE: one warp per (token, head) row of head_dim <= HNR_MAX_DIM ----
 * Lane l holds the pairs (i, i + half) for i = l, l + 32, ... < half: exactly the elements RoPE mixes,
 * so the whole op stays in registers; the backward reads its row before writing it (dx may be dy). */

#define HNR_MAX_DIM 256
#define HNR_PAIRS (HNR_MAX_DIM / 64) /* pairs per lane */

static __global__ void head_norm_rope_fwd_kernel(bf16 *y, float *rstd, const bf16 *x, const float *w,
                                                 const int32_t *pos, const float *inv_freq, int64_t rows, int heads,
                                                 int head_dim, float eps) {
    int64_t row = (int64_t)blockIdx.x * RMS_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x & 31, half = head_dim / 2;
    if (row >= rows) return;
    const bf16 *xr = x + row * head_dim;
    float a[HNR_PAIRS], b[HNR_PAIRS], ss = 0;
#pragma unroll
    for (int p = 0; p < HNR_PAIRS; p++) {
        int i = lane + 32 * p;
        a[p] = i < half ? __bfloat162float(xr[i]) : 0.0f;
        b[p] = i < half ? __bfloat162float(xr[i + half]) : 0.0f;
        ss += a[p] * a[p] + b[p] * b[p];
    }
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)head_dim + eps);
    if (lane == 0) rstd[row] = r;
    float t = (float)pos[row / heads];
    bf16 *yr = y + row * head_dim;
#pragma unroll
    for (int p = 0; p < HNR_PAIRS; p++) {
        int i = lane + 32 * p;
        if (i >= half) break;
        float na = a[p] * r * w[i], nb = b[p] * r * w[i + half], sn, cs;
        sincosf(__fmul_rn(t, inv_freq[i]), &sn, &cs);
        yr[i] = __float2bfloat16(na * cs - nb * sn);
        yr[i + half] = __float2bfloat16(nb * cs + na * sn);
    }
}

static __global__ void head_norm_rope_bwd_kernel(bf16 *dx, const bf16 *dy, const bf16 *x, const float *rstd,
                                                 const float *w, const int32_t *pos, const float *inv_freq,
                                                 int64_t rows, int heads, int head_dim) {
    int64_t row = (int64_t)blockIdx.x * RMS_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x & 31, half = head_dim / 2;
    if (row >= rows) return;
    const bf16 *xr = x + row * head_dim, *dyr = dy + row * head_dim;
    float t = (float)pos[row / heads], r = rstd[row];
    float xa[HNR_PAIRS], xb[HNR_PAIRS], ga[HNR_PAIRS], gb[HNR_PAIRS], dot = 0;
#pragma unroll
    for (int p = 0; p < HNR_PAIRS; p++) {
        int i = lane + 32 * p;
        xa[p] = xb[p] = ga[p] = gb[p] = 0.0f;
        if (i >= half) continue;
        float da = __bfloat162float(dyr[i]), db = __bfloat162float(dyr[i + half]), sn, cs;
        sincosf(__fmul_rn(t, inv_freq[i]), &sn, &cs);
        ga[p] = da * cs + db * sn; /* rotation by -angle: RoPE's backward */
        gb[p] = db * cs - da * sn;
        xa[p] = __bfloat162float(xr[i]);
        xb[p] = __bfloat162float(xr[i + half]);
        dot += w[i] * ga[p] * xa[p] + w[i + half] * gb[p] * xb[p];
    }
    dot = warp_sum(dot);
    float c = r * r * r * dot / (float)head_dim;
    bf16 *dxr = dx + row * head_dim;
#pragma unroll
    for (int p = 0; p < HNR_PAIRS; p++) {
        int i = lane + 32 * p;
        if (i >= half) break;
        dxr[i] = __float2bfloat16(r * w[i] * ga[p] - xa[p] * c);
        dxr[i + half] = __float2bfloat16(r * w[i + half] * gb[p] - xb[p] * c);
    }
}

void qlt_cuda_head_norm_rope_fwd(qlt_backend *be, void *y, float *rstd, const void *x, const float *w,
                                 const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                                 float eps) {
    if (n <= 0) return;
    QLT_ASSERT(head_dim % 2 == 0);
    int64_t rows = n * heads;
    if (head_dim > HNR_MAX_DIM) { /* wider heads than the registers hold: the two ops one after the other */
        qlt_cuda_rmsnorm_fwd(be, y, rstd, x, w, rows, head_dim, eps);
        qlt_cuda_rope(be, y, pos, inv_freq, n, heads, head_dim, 0);
        return;
    }
    unsigned grid = (unsigned)((rows + RMS_WARPS - 1) / RMS_WARPS);
    head_norm_rope_fwd_kernel<<<grid, 32 * RMS_WARPS, 0, cuda_impl_of(be)->stream>>>(
        (bf16 *)y, rstd, (const bf16 *)x, w, pos, inv_freq, rows, heads, head_dim, eps);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_head_norm_rope_bwd(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd,
                                 const float *w, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                                 int head_dim) {
    if (n <= 0) return;
    QLT_ASSERT(head_dim % 2 == 0);
    int64_t rows = n * heads;
    if (head_dim > HNR_MAX_DIM) { /* rope^-1 on a copy of dy, then the norm's backward in place (row by row) */
        qlt_cuda_copy(be, dx, dy, rows * head_dim);
        qlt_cuda_rope(be, dx, pos, inv_freq, n, heads, head_dim, 1);
        qlt_cuda_rmsnorm_bwd(be, dx, dx, x, rstd, w, rows, head_dim, 0.0f);
        return;
    }
    unsigned grid = (unsigned)((rows + RMS_WARPS - 1) / RMS_WARPS);
    head_norm_rope_bwd_kernel<<<grid, 32 * RMS_WARPS, 0, cuda_impl_of(be)->stream>>>(
        (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, rstd, w, pos, inv_freq, rows, heads, head_dim);
    CUDA_CHECK_LAUNCH();
}
