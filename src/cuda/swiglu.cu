/* swiglu.cu: SwiGLU forward and backward on the stacked gate+up output gu [N, 2I], the twin of
 * src/cpu/swiglu.c: h = silu(g) * u; dsilu/dg = sig (1 + g (1 - sig)). Eight elements a thread (16-byte loads
 * and stores) when I % 8 == 0 and the buffers are aligned. */
#include "cuda/cuda_common.h"

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
