/* rmsnorm.cu: RMSNorm forward and backward, one warp per row (rows are hidden states, d = hidden, or
 * single heads for Qwen3's q/k norms, d = head_dim). fp32 math; 16-byte loads when d % 8 == 0.
 * fwd: y = x * r * w, r = rsqrt(mean(x^2) + eps) saved.  bwd: dx = beta dx + r w dy - x r^3/d sum(w dy x). */
#include "cuda/cuda_common.h"

#define RMS_WARPS 4

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ void load8(const bf16 *p, float f[8]) {
    uint4 raw = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 v = __bfloat1622float2(h[j]);
        f[2 * j] = v.x;
        f[2 * j + 1] = v.y;
    }
}

static __device__ __forceinline__ void store8(bf16 *p, const float f[8]) {
    uint4 raw;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&raw;
#pragma unroll
    for (int j = 0; j < 4; j++) h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    *(uint4 *)p = raw;
}

template <bool VEC>
static __global__ void rmsnorm_fwd_kernel(bf16 *y, float *rstd, const bf16 *x, const float *w, int64_t n, int64_t d,
                                          float eps) {
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
#pragma unroll
            for (int e = 0; e < 8; e++) ss += f[e] * f[e];
        }
    } else {
        for (int64_t j = lane; j < d; j += 32) {
            float v = __bfloat162float(xr[j]);
            ss += v * v;
        }
    }
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

static bool rms_vec_ok(int64_t d, const void *a, const void *b, const void *c) {
    return (d & 7) == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

void qlt_cuda_rmsnorm_fwd(qlt_backend *be, void *y, float *rstd, const void *x, const float *w, int64_t n, int64_t d,
                          float eps) {
    if (n <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    unsigned grid = (unsigned)((n + RMS_WARPS - 1) / RMS_WARPS);
    if (rms_vec_ok(d, y, x, x))
        rmsnorm_fwd_kernel<true><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)x, w, n, d, eps);
    else
        rmsnorm_fwd_kernel<false><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)y, rstd, (const bf16 *)x, w, n, d, eps);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_rmsnorm_bwd(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd, const float *w,
                          int64_t n, int64_t d, float beta) {
    if (n <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    unsigned grid = (unsigned)((n + RMS_WARPS - 1) / RMS_WARPS);
    if (rms_vec_ok(d, dx, dy, x))
        rmsnorm_bwd_kernel<true><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, rstd, w,
                                                                 n, d, beta);
    else
        rmsnorm_bwd_kernel<false><<<grid, 32 * RMS_WARPS, 0, s>>>((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, rstd, w,
                                                                  n, d, beta);
    CUDA_CHECK_LAUNCH();
}
