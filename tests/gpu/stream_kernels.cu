/* stream_kernels.cu: reference traffic patterns for the bandwidth rows of check_nf4.c (C callable): the
 * NF4 dequantization's own memory pattern with no arithmetic, to show how close the kernel gets to what
 * that pattern can move at all on the device. */
#include <cuda_runtime.h>
#include <stdint.h>

/* chunk c: read 4 bytes of in, write 16 bytes of out (the bf16 dequantization's 1 : 4 ratio: 8 codes in, 8
 * values out); thread t takes chunks t and t + (threads in the grid), like the dequantize kernel */
static __global__ void stream_1to4_kernel(uint4 *out, const uint32_t *in, int64_t chunks) {
    const int64_t c0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, c1 = c0 + (int64_t)gridDim.x * blockDim.x;
    const uint32_t a = c0 < chunks ? __ldg(in + c0) : 0u, b = c1 < chunks ? __ldg(in + c1) : 0u;
    if (c0 < chunks) out[c0] = make_uint4(a, a ^ 1u, a ^ 2u, a ^ 3u);
    if (c1 < chunks) out[c1] = make_uint4(b, b ^ 1u, b ^ 2u, b ^ 3u);
}

/* out [chunks x 16 bytes], in [chunks x 4 bytes], both 16-byte aligned; on the default stream */
extern "C" void gpu_check_stream_1to4(void *out, const void *in, int64_t chunks) {
    const int64_t threads = (chunks + 1) / 2;
    stream_1to4_kernel<<<(unsigned)((threads + 255) / 256), 256>>>((uint4 *)out, (const uint32_t *)in, chunks);
}
