/* probe_operands.h: what the measuring tools (tools/*_probe.cu) fill their operands with and how they compare
 * outputs: deterministic pseudo-random bf16 in [-scale/2, scale/2) from a hash of the index, and the max
 * |difference| of two bf16 arrays. */
#ifndef QLT_PROBE_OPERANDS_H
#define QLT_PROBE_OPERANDS_H

#include <cuda_bf16.h>

#include <cstddef>

static __global__ void fill_kernel(__nv_bfloat16 *p, size_t n, unsigned seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
        p[i] = __float2bfloat16(((h & 0xffff) / 65536.0f - 0.5f) * scale);
    }
}

/* *out = max |a - b| (as float bits: non-negative floats order like ints; *out zeroed by the caller) */
static __global__ void maxdiff_kernel(const __nv_bfloat16 *a, const __nv_bfloat16 *b, size_t n, float *out) {
    float m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(__bfloat162float(a[i]) - __bfloat162float(b[i])));
    atomicMax((int *)out, __float_as_int(m));
}

#endif
