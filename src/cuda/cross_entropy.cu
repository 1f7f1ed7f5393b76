/* cross_entropy.cu: fused lm_head + cross-entropy, never holding [N, V] logits: tokens in chunks of at
 * most CE_CHUNK (the contract's scratch: the chunk's logits and per-token losses).
 *   1. logits [T, V] bf16 = x_chunk W^T                          (cuBLAS, fp32 accumulation, one rounding)
 *   2. one block per token: lse (fp32) by an online max/sum over the row, the token's loss into
 *      losses[T], and (training) dlogits = grad_scale (softmax - onehot) written as bf16 IN PLACE over
 *      the token's logits (each thread rewrites only the values it read), 0 rows for ignored (-100) targets
 *   3. dx_chunk [T, D] = dlogits W                              (cuBLAS, bf16)
 *   4. one block sums losses[T] in a fixed order and adds it to scalars->loss_sum (deterministic).
 * The logits are rounded to bf16 once and the loss is computed from them in fp32, as Hugging Face models
 * in bf16 do (the lm_head's bf16 output, upcast for the cross-entropy); bf16 rather than fp32 logits also
 * halve the bytes of the chunk's three passes (GEMM write, two reads by the CE kernel). */
#include "cuda/cuda_common.h"

/* Tokens per chunk: bf16 logits of 2048 tokens of a 152k vocabulary are 0.6 GB; larger chunks buy little
 * (the chunk GEMMs are already large) and cost memory that a 7B step under 8 GiB cannot spare. */
#define CE_CHUNK 2048
#define CE_THREADS 1024

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

/* running (max, sum of exp) over n values */
static __device__ __forceinline__ void ms_add(float &m, float &s, const float *x, int n) {
    float xm = x[0];
    for (int e = 1; e < n; e++) xm = fmaxf(xm, x[e]);
    if (xm > m) {
        s *= __expf(m - xm);
        m = xm;
    }
    for (int e = 0; e < n; e++) s += __expf(x[e] - m);
}

/* VEC: the row is read and written 8 bf16 (16 bytes) at a time (V % 8 == 0, 16-byte aligned rows) */
template <bool VEC>
static __global__ void __launch_bounds__(CE_THREADS) ce_row_kernel(bf16 *logits, float *losses, const int32_t *targets,
                                                                   int64_t V, const float *grad_scale_ptr,
                                                                   int want_grad) {
    const float grad_scale = *grad_scale_ptr; /* device memory: a captured graph replays with the new value */
    __shared__ float sm[32], ss[32];
    __shared__ float s_lse;
    const int64_t row = blockIdx.x;
    bf16 *lr = logits + row * V;
    const int tid = threadIdx.x;
    const int32_t target = targets[row];
    if (target < 0) {
        if (tid == 0) losses[row] = 0.0f;
        if (want_grad)
            for (int64_t i = tid; i < V; i += CE_THREADS) lr[i] = __float2bfloat16(0.0f);
        return;
    }
    /* pass 1: online max / sum of exp */
    float m = -INFINITY, s = 0.0f;
    if (VEC) {
        for (int64_t i = tid; i < V / 8; i += CE_THREADS) {
            float x[8];
            qlt_bf16x8_unpack(((const uint4 *)lr)[i], x);
            ms_add(m, s, x, 8);
        }
    } else {
        for (int64_t i = tid; i < V; i += CE_THREADS) {
            float x = __bfloat162float(lr[i]);
            ms_add(m, s, &x, 1);
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
            losses[row] = lse - __bfloat162float(lr[target]);
        }
    }
    __syncthreads(); /* the target logit is read before any bf16 write below */
    if (!want_grad) return;
    const float lse = s_lse;
    /* pass 2: each thread overwrites exactly the values it reads */
    if (VEC) {
        for (int64_t i = tid; i < V / 8; i += CE_THREADS) {
            float x[8];
            qlt_bf16x8_unpack(((const uint4 *)lr)[i], x);
#pragma unroll
            for (int e = 0; e < 8; e++) x[e] = grad_scale * (__expf(x[e] - lse) - (8 * i + e == target ? 1.0f : 0.0f));
            ((uint4 *)lr)[i] = qlt_bf16x8_pack(x);
        }
    } else {
        for (int64_t i = tid; i < V; i += CE_THREADS) {
            float x = __bfloat162float(lr[i]);
            lr[i] = __float2bfloat16(grad_scale * (__expf(x - lse) - (i == target ? 1.0f : 0.0f)));
        }
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
    size_t logits = ((size_t)rows * (size_t)v * sizeof(bf16) + 15) & ~(size_t)15;
    return logits + (size_t)rows * sizeof(float);
}

void qlt_cuda_lm_head_loss(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch, const void *x,
                           const qlt_weight *w, const int32_t *targets, int64_t n) {
    const float *grad_scale = &scalars->grad_scale;
    if (n <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    const int64_t V = w->rows, D = w->cols;
    const bf16 *wb = qlt_cuda_weight_bf16(be, w);
    bf16 *logits = (bf16 *)scratch;
    int64_t T = n < CE_CHUNK ? n : CE_CHUNK;
    float *losses = (float *)((char *)scratch + (((size_t)T * (size_t)V * sizeof(bf16) + 15) & ~(size_t)15));
    bool vec = (V & 7) == 0 && ((uintptr_t)scratch & 15) == 0;
    for (int64_t t0 = 0; t0 < n; t0 += CE_CHUNK) {
        int64_t tn = n - t0 < CE_CHUNK ? n - t0 : CE_CHUNK;
        qlt_cuda_gemm(be, 0, 1, tn, V, D, 1.0f, (const bf16 *)x + t0 * D, CUDA_R_16BF, D, wb, CUDA_R_16BF, D, 0.0f,
                      logits, CUDA_R_16BF, V);
        if (vec)
            ce_row_kernel<true><<<(unsigned)tn, CE_THREADS, 0, s>>>(logits, losses, targets + t0, V, grad_scale, dx != NULL);
        else
            ce_row_kernel<false><<<(unsigned)tn, CE_THREADS, 0, s>>>(logits, losses, targets + t0, V, grad_scale,
                                                                    dx != NULL);
        CUDA_CHECK_LAUNCH();
        if (dx)
            qlt_cuda_gemm(be, 0, 0, tn, D, V, 1.0f, logits, CUDA_R_16BF, V, wb, CUDA_R_16BF, D, 0.0f,
                          (bf16 *)dx + t0 * D, CUDA_R_16BF, D);
        loss_sum_kernel<<<1, 256, 0, s>>>(&scalars->loss_sum, losses, tn);
        CUDA_CHECK_LAUNCH();
    }
}
