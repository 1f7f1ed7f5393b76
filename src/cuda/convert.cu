/* convert.cu: small stream-ordered conversions other files use (fp32 / fp16 -> bf16, a bias added to bf16
 * rows) and the random bf16 fill of the benchmarks (a counter hash: values uniform in [-1, 1)). */
#include "common/counter_hash.h"
#include "cuda/cuda_common.h"

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

static __global__ void fill_random_kernel(bf16 *out, int64_t count, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        out[i] = __float2bfloat16((float)(qlt_counter_hash(seed, (uint64_t)i) >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
}

void qlt_cuda_fill_random_bf16(cudaStream_t s, bf16 *out, int64_t count, uint64_t seed) {
    fill_random_kernel<<<qlt_grid(count, 256), 256, 0, s>>>(out, count, seed);
    CUDA_CHECK_LAUNCH();
}
