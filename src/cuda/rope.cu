/* rope.cu: rotary position embedding in place, forward and inverse (HF rotate-half: element i pairs with
 * i + half; angle = float(pos) * inv_freq[i] in fp32), the twin of src/cpu/rope.c. */
#include "cuda/cuda_common.h"

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
