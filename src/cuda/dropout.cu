/* dropout.cu: inverted dropout with the keep-mask of common/counter_hash.h, shared with the CPU reference
 * (src/cpu/dropout.c), so the backward regenerates the same mask. */
#include "common/counter_hash.h"
#include "cuda/cuda_common.h"

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
