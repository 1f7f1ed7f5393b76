/* add_copy.cu: the residual add, copies (whole buffers and strided rows) and zeroing, bf16. */
#include "cuda/cuda_common.h"

static __global__ void add_kernel(bf16 *out, const bf16 *a, const bf16 *b, int64_t count) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

/* 8 elements per thread when every pointer is 16-byte aligned */
static __global__ void add8_kernel(uint4 *out, const uint4 *a, const uint4 *b, int64_t count8) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count8; i += (int64_t)gridDim.x * blockDim.x) {
        uint4 va = a[i], vb = b[i], vo;
        const __nv_bfloat162 *pa = (const __nv_bfloat162 *)&va, *pb = (const __nv_bfloat162 *)&vb;
        __nv_bfloat162 *po = (__nv_bfloat162 *)&vo;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
            po[j] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
        }
        out[i] = vo;
    }
}

void qlt_cuda_add(qlt_backend *be, void *out, const void *a, const void *b, int64_t count) {
    if (count <= 0) return;
    cudaStream_t s = cuda_impl_of(be)->stream;
    if ((count & 7) == 0 && (((uintptr_t)out | (uintptr_t)a | (uintptr_t)b) & 15) == 0)
        add8_kernel<<<qlt_grid(count / 8, 256), 256, 0, s>>>((uint4 *)out, (const uint4 *)a, (const uint4 *)b,
                                                             count / 8);
    else
        add_kernel<<<qlt_grid(count, 256), 256, 0, s>>>((bf16 *)out, (const bf16 *)a, (const bf16 *)b, count);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_copy(qlt_backend *be, void *out, const void *x, int64_t count) {
    if (count <= 0 || out == x) return;
    CUDA_CHECK(cudaMemcpyAsync(out, x, sizeof(bf16) * (size_t)count, cudaMemcpyDeviceToDevice,
                               cuda_impl_of(be)->stream));
}

/* dst [rows, cols] (row stride ldd) = src [rows, cols] (row stride lds), bf16: the [x | T3] operands of the
 * folded GEMMs. 16 bytes a thread when every stride and pointer allows it (faster than cudaMemcpy2DAsync on
 * these short rows). */
template <typename T>
static __global__ void copy_rows_kernel(T *dst, int64_t ldd, const T *src, int64_t lds, int64_t rows, int64_t cols) {
    const int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / cols, c = i - row * cols;
        dst[row * ldd + c] = src[row * lds + c];
    }
}

void qlt_cuda_copy_rows(cudaStream_t s, bf16 *dst, int64_t ldd, const bf16 *src, int64_t lds, int64_t rows,
                        int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    if (((cols | ldd | lds) & 7) == 0 && (((uintptr_t)dst | (uintptr_t)src) & 15) == 0)
        copy_rows_kernel<uint4><<<qlt_grid(rows * cols / 8, 256), 256, 0, s>>>((uint4 *)dst, ldd / 8, (const uint4 *)src,
                                                                              lds / 8, rows, cols / 8);
    else
        copy_rows_kernel<bf16><<<qlt_grid(rows * cols, 256), 256, 0, s>>>(dst, ldd, src, lds, rows, cols);
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_zero(qlt_backend *be, void *p, size_t bytes) {
    if (bytes == 0 || cuda_impl_of(be)->plan.on) return;
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_impl_of(be)->stream));
}
