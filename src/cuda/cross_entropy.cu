/* cross_entropy.cu: fused lm_head + cross-entropy, never holding [N, V] logits: tokens in chunks of at
 * most 4096 (the contract's scratch: chunk * (V + 2) fp32).
 *   1. logits [T, V] fp32 = x_chunk W^T                          (cuBLAS, bf16 in, fp32 out)
 *   2. one block per token: lse by an online max/sum, the token's loss into losses[T], and (training)
 *      dlogits = grad_scale (softmax - onehot) written as bf16 IN PLACE over the first half of the
 *      token's own fp32 row (row stride 2V bf16), 0 rows for ignored (-100) targets
 *   3. dx_chunk [T, D] = dlogits W                              (cuBLAS, bf16, lda = 2V)
 *   4. one block sums losses[T] in a fixed order and adds it to scalars->loss_sum (deterministic).
 * In-place safety of step 2: a block converts its row in segments of 4096 values; all reads of a segment
 * finish (barrier) before its bf16 writes, which only touch fp32 words below the segment's end. */
#include "cuda/cuda_common.h"

/* Tokens per chunk: fp32 logits of 1024 tokens of a 152k vocabulary are 0.6 GB; larger chunks buy little
 * (the chunk GEMMs are already large) and cost memory that a 7B step under 8 GiB cannot spare. */
#define CE_CHUNK 1024
#define CE_THREADS 1024
#define CE_SEG (CE_THREADS * 4)

static __device__ __forceinline__ void ms_combine(float &m, float &s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == -INFINITY) {
        m = mn;
        s = 0.0f;
        return;
    }
    s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
    m = mn;
}

template <bool VEC>
static __global__ void __launch_bounds__(CE_THREADS) ce_row_kernel(float *logits, float *losses, const int32_t *targets,
                                                                   int64_t V, const float *grad_scale_ptr,
                                                                   int want_grad) {
    const float grad_scale = *grad_scale_ptr; /* device memory: a captured graph replays with the new value */
    __shared__ float sm[32], ss[32];
    __shared__ float s_lse;
    const int64_t row = blockIdx.x;
    float *lr = logits + row * V;
    bf16 *gr = (bf16 *)lr;
    const int tid = threadIdx.x;
    const int32_t target = targets[row];
    if (target < 0) {
        if (tid == 0) losses[row] = 0.0f;
        if (want_grad)
            for (int64_t i = tid; i < V; i += CE_THREADS) gr[i] = __float2bfloat16(0.0f);
        return;
    }
    /* pass 1: online max / sum of exp */
    float m = -INFINITY, s = 0.0f;
    if (VEC) {
        const float4 *l4 = (const float4 *)lr;
        for (int64_t i = tid; i < V / 4; i += CE_THREADS) {
            float4 x = l4[i];
            float xm = fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w));
            if (xm > m) {
                s *= __expf(m - xm);
                m = xm;
            }
            s += __expf(x.x - m) + __expf(x.y - m) + __expf(x.z - m) + __expf(x.w - m);
        }
    } else {
        for (int64_t i = tid; i < V; i += CE_THREADS) {
            float x = lr[i];
            if (x > m) {
                s *= __expf(m - x);
                m = x;
            }
            s += __expf(x - m);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_combine(m, s, m2, s2);
    }
    if ((tid & 31) == 0) {
        sm[tid / 32] = m;
        ss[tid / 32] = s;
    }
    __syncthreads();
    if (tid < 32) {
        m = sm[tid];
        s = ss[tid];
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            ms_combine(m, s, m2, s2);
        }
        if (tid == 0) {
            float lse = m + logf(s);
            s_lse = lse;
            losses[row] = lse - lr[target];
        }
    }
    __syncthreads(); /* the target logit is read before any bf16 write below */
    if (!want_grad) return;
    const float lse = s_lse;
    for (int64_t seg0 = 0; seg0 < V; seg0 += CE_SEG) {
        float g[4];
        int64_t base = seg0 + 4 * (int64_t)tid;
        if (VEC) {
            if (base < V) {
                float4 x = *(const float4 *)(lr + base);
                g[0] = x.x;
                g[1] = x.y;
                g[2] = x.z;
                g[3] = x.w;
            }
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++) g[e] = base + e < V ? lr[base + e] : 0.0f;
        }
#pragma unroll
        for (int e = 0; e < 4; e++) g[e] = grad_scale * (__expf(g[e] - lse) - (base + e == target ? 1.0f : 0.0f));
        __syncthreads();
        if (VEC) {
            if (base < V) {
                uint2 packed;
                __nv_bfloat162 *p2 = (__nv_bfloat162 *)&packed;
                p2[0] = __floats2bfloat162_rn(g[0], g[1]);
                p2[1] = __floats2bfloat162_rn(g[2], g[3]);
                *(uint2 *)(gr + base) = packed;
            }
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (base + e < V) gr[base + e] = __float2bfloat16(g[e]);
        }
        __syncthreads();
    }
}

/* fixed-order sum of losses[n] into *loss_sum (one block) */
static __global__ void loss_sum_kernel(float *loss_sum, const float *losses, int64_t n) {
    __shared__ double part[256];
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += 256) acc += losses[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss_sum += (float)part[0];
}

size_t qlt_cuda_loss_scratch_bytes(qlt_backend *be, int64_t n, int64_t v) {
    int64_t rows = n < CE_CHUNK ? n : CE_CHUNK;
    return (size_t)rows * ((size_t)v + 1) * sizeof(float) + 16;
}

void qlt_cuda_lm_head_loss(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch, const void *x,
                           const qlt_weight *w, const int32_t *targets, int64_t n) {
    const float *grad_scale = &scalars->grad_scale;
    if (n <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    const int64_t V = w->rows, D = w->cols;
    const bf16 *wb = qlt_cuda_weight_bf16(be, w);
    float *logits = (float *)scratch;
    int64_t T = n < CE_CHUNK ? n : CE_CHUNK;
    float *losses = logits + T * V;
    bool vec = (V & 3) == 0 && ((uintptr_t)scratch & 15) == 0;
    for (int64_t t0 = 0; t0 < n; t0 += CE_CHUNK) {
        int64_t tn = n - t0 < CE_CHUNK ? n - t0 : CE_CHUNK;
        qlt_cuda_gemm(be, 0, 1, tn, V, D, 1.0f, (const bf16 *)x + t0 * D, CUDA_R_16BF, D, wb, CUDA_R_16BF, D, 0.0f,
                      logits, CUDA_R_32F, V);
        if (vec)
            ce_row_kernel<true><<<(unsigned)tn, CE_THREADS, 0, s>>>(logits, losses, targets + t0, V, grad_scale, dx != NULL);
        else
            ce_row_kernel<false><<<(unsigned)tn, CE_THREADS, 0, s>>>(logits, losses, targets + t0, V, grad_scale,
                                                                    dx != NULL);
        CUDA_CHECK_LAUNCH();
        if (dx)
            qlt_cuda_gemm(be, 0, 0, tn, D, V, 1.0f, logits, CUDA_R_16BF, 2 * V, wb, CUDA_R_16BF, D, 0.0f,
                          (bf16 *)dx + t0 * D, CUDA_R_16BF, D);
        loss_sum_kernel<<<1, 256, 0, s>>>(&scalars->loss_sum, losses, tn);
        CUDA_CHECK_LAUNCH();
    }
}
