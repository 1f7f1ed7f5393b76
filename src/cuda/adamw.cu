/* adamw.cu: the optimizer step over the contiguous fp32 LoRA arena.
 * grad_norm_sq: deterministic two-pass reduction (a FIXED grid of QLT_CUDA_NORM_BLOCKS blocks writes
 * double partial sums, one block adds them in a fixed order): repeated runs are bit-identical.
 * adamw: one launch; every scalar (lr, betas, eps, weight decay, bias corrections, max norm, grad norm)
 * is read from the device-resident qlt_optim_scalars, so a captured graph replays with new values; the norm's
 * last kernel decides on the device whether the step is skipped (qlt_optim_guard), and adamw reads that flag, so
 * a non-finite step is dropped without the host waiting for it.
 * The arithmetic is written with explicit round-to-nearest intrinsics (no FMA contraction) in the same
 * order as src/cpu/adamw.c, so the update matches the CPU reference bit for bit on equal inputs. */
#include "cuda/cuda_common.h"

#include "backend/optim_guard.h"

#define NORM_THREADS 256

static __global__ void __launch_bounds__(NORM_THREADS) sumsq_partial_kernel(double *partials, const float *g,
                                                                            int64_t count) {
    __shared__ double part[NORM_THREADS];
    double acc = 0;
    for (int64_t i = blockIdx.x * (int64_t)NORM_THREADS + threadIdx.x; i < count; i += (int64_t)gridDim.x * NORM_THREADS) {
        double v = g[i];
        acc += v * v;
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = NORM_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = part[0];
}

/* The sum, then qlt_optim_guard on one thread: skip, the counters and the bias corrections (as the CPU). */
static __global__ void sumsq_final_kernel(qlt_optim_scalars *sc, const double *partials, int n) {
    __shared__ double part[QLT_CUDA_NORM_BLOCKS];
    for (int i = threadIdx.x; i < QLT_CUDA_NORM_BLOCKS; i += blockDim.x) part[i] = i < n ? partials[i] : 0.0;
    __syncthreads();
    for (int w = QLT_CUDA_NORM_BLOCKS / 2; w > 0; w >>= 1) {
        for (int i = threadIdx.x; i < w; i += blockDim.x) part[i] += part[i + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        sc->grad_norm_sq = (float)part[0];
        qlt_optim_guard(sc);
    }
}

void qlt_cuda_grad_norm_sq(qlt_backend *be, qlt_optim_scalars *scalars, const float *g, int64_t count) {
    cuda_impl *impl = cuda_impl_of(be);
    if (qlt_cuda_faulted()) return; /* the optimizer state stays the last finished step's */
    sumsq_partial_kernel<<<QLT_CUDA_NORM_BLOCKS, NORM_THREADS, 0, impl->stream>>>(impl->partials, g, count);
    CUDA_CHECK_LAUNCH();
    sumsq_final_kernel<<<1, 256, 0, impl->stream>>>(scalars, impl->partials, QLT_CUDA_NORM_BLOCKS);
    CUDA_CHECK_LAUNCH();
}

static __global__ void adamw_kernel(float *p, const float *g, float *m, float *v, int64_t count,
                                    const qlt_optim_scalars *sc) {
    if (sc->skip) return; /* a non-finite loss or gradient norm: p, m and v keep their bits */
    const float lr = sc->lr, beta1 = sc->beta1, beta2 = sc->beta2, eps = sc->eps, wd = sc->weight_decay;
    const float max_norm = sc->max_grad_norm;
    float clip = 1.0f; /* qlt_clip_scale */
    if (max_norm > 0.0f) {
        float norm = __fsqrt_rn(sc->grad_norm_sq);
        float coef = __fdiv_rn(max_norm, __fadd_rn(norm, 1e-6f));
        clip = coef < 1.0f ? coef : 1.0f;
    }
    const float step_size = __fdiv_rn(lr, sc->bias_correction1);
    const float bc2_sqrt = __fsqrt_rn(sc->bias_correction2);
    const float decay = __fsub_rn(1.0f, __fmul_rn(lr, wd));
    const float one_b1 = __fsub_rn(1.0f, beta1), one_b2 = __fsub_rn(1.0f, beta2);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        float gi = __fmul_rn(g[i], clip);
        float pi = __fmul_rn(p[i], decay);
        float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(one_b1, gi));
        float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(one_b2, gi), gi));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        pi = __fsub_rn(pi, __fdiv_rn(__fmul_rn(step_size, mi), denom));
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}

void qlt_cuda_adamw(qlt_backend *be, float *p, const float *g, float *m, float *v, int64_t count,
                    const qlt_optim_scalars *scalars) {
    if (count <= 0 || qlt_cuda_faulted()) return;
    cuda_impl *impl = cuda_impl_of(be);
    adamw_kernel<<<qlt_grid(count, 256, (int64_t)impl->n_sm * 8), 256, 0, impl->stream>>>(p, g, m, v, count, scalars);
    CUDA_CHECK_LAUNCH();
}
