/* nf4_gemv.cu: y [n, rows] = x [n, cols] . W^T for an NF4 weight and a few tokens (n <= QLT_NF4_GEMV_MAX_TOKENS:
 * generation's one token a step), reading W's 4-bit codes once and never writing its dequantized copy, so a
 * token costs the NF4 bytes of the weights (dequantize + cuBLAS would write and read them again in bf16).
 *
 * A warp computes one row: each lane takes 32 consecutive values of the row at a time (16 code bytes: one
 * 16-byte load; the 32 values lie in one quantization block, since blocks are powers of two >= 32 and rows are
 * multiples of 32), dequantizes them exactly as the dequantize kernel does (code * block scale with the
 * flush-to-zero multiply, the nested scale of double quantization, rounded to bf16: the same weights the
 * training and eval GEMMs read), multiplies by x in fp32 and the warp sums its lanes. The bias (bf16 output
 * rounding once, as the cuBLASLt epilogue) is added before the one rounding of y. */
#include "cuda/cuda_common.h"

#define GEMV_WARPS 8

struct gemv_weight {
    const uint8_t *codes;        /* [rows * cols / 2] */
    const float *code;           /* [16] the codebook */
    const float *absmax;         /* [nblocks] (plain) */
    const uint8_t *absmax_q;     /* [nblocks] (double quantization) */
    const float *nested_absmax;  /* [nested_nblocks] */
    const float *nested_code;    /* [256] */
    float offset;
    int log2_blocksize;
};

static __device__ __forceinline__ float gemv_mul_ftz(float a, float b) {
    float r;
    asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

template <bool NESTED>
static __device__ __forceinline__ float gemv_block_scale(const gemv_weight &w, int64_t blk) {
    if (NESTED)
        return __fadd_rn(gemv_mul_ftz(__ldg(w.nested_code + __ldg(w.absmax_q + blk)),
                                      __ldg(w.nested_absmax + blk / QLT_NF4_NESTED_BLOCKSIZE)),
                         w.offset);
    return __ldg(w.absmax + blk);
}

template <bool NESTED, int NT>
static __global__ void __launch_bounds__(32 * GEMV_WARPS) nf4_gemv_kernel(bf16 *__restrict__ y, int64_t ldy,
                                                                          const bf16 *__restrict__ x, int64_t ldx,
                                                                          gemv_weight w, int64_t rows, int64_t cols,
                                                                          const float *__restrict__ bias) {
    __shared__ float lut[16];
    if (threadIdx.x < 16) lut[threadIdx.x] = w.code[threadIdx.x];
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const int64_t first = row * cols; /* flat index of the row's first value */
#pragma unroll 4
    for (int64_t c0 = 32 * (int64_t)lane; c0 < cols; c0 += 32 * 32) {
        const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(w.codes + (first + c0) / 2));
        const float s = gemv_block_scale<NESTED>(w, (first + c0) >> w.log2_blocksize);
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int q = 0; q < 4; q++) { /* 8 values: code bytes 4q .. 4q + 3 */
            float wv[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t byte = (words[q] >> (8 * j)) & 0xffu;
                wv[2 * j] = __bfloat162float(__float2bfloat16_rn(gemv_mul_ftz(lut[byte >> 4], s)));
                wv[2 * j + 1] = __bfloat162float(__float2bfloat16_rn(gemv_mul_ftz(lut[byte & 0x0f], s)));
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float xv[8];
                qlt_bf16x8_unpack(__ldg(reinterpret_cast<const uint4 *>(x + t * ldx + c0 + 8 * q)), xv);
#pragma unroll
                for (int e = 0; e < 8; e++) acc[t] = fmaf(wv[e], xv[e], acc[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
    }
    if (lane == 0) {
        const float b = bias ? bias[row] : 0.0f;
#pragma unroll
        for (int t = 0; t < NT; t++) y[t * ldy + row] = __float2bfloat16_rn(acc[t] + b);
    }
}

bool qlt_cuda_nf4_gemv_applies(const qlt_weight *w, int64_t n, const void *x) {
    return n >= 1 && n <= QLT_NF4_GEMV_MAX_TOKENS && w->format == QLT_WFORMAT_NF4 && w->cols % 32 == 0 &&
           w->nf4.blocksize >= 32 && ((uintptr_t)x & 15) == 0;
}

template <bool NESTED>
static void gemv_launch(cudaStream_t s, bf16 *y, int64_t ldy, const bf16 *x, const gemv_weight &gw, int64_t rows,
                        int64_t cols, const float *bias, int64_t n) {
    const unsigned grid = (unsigned)((rows + GEMV_WARPS - 1) / GEMV_WARPS);
    switch (n) {
    case 1: nf4_gemv_kernel<NESTED, 1><<<grid, 32 * GEMV_WARPS, 0, s>>>(y, ldy, x, cols, gw, rows, cols, bias); break;
    case 2: nf4_gemv_kernel<NESTED, 2><<<grid, 32 * GEMV_WARPS, 0, s>>>(y, ldy, x, cols, gw, rows, cols, bias); break;
    case 3: nf4_gemv_kernel<NESTED, 3><<<grid, 32 * GEMV_WARPS, 0, s>>>(y, ldy, x, cols, gw, rows, cols, bias); break;
    default: nf4_gemv_kernel<NESTED, 4><<<grid, 32 * GEMV_WARPS, 0, s>>>(y, ldy, x, cols, gw, rows, cols, bias); break;
    }
    CUDA_CHECK_LAUNCH();
}

void qlt_cuda_nf4_gemv(qlt_backend *be, bf16 *y, int64_t ldy, const bf16 *x, const qlt_weight *w, const float *bias,
                       int64_t n) {
    QLT_ASSERT(qlt_cuda_nf4_gemv_applies(w, n, x));
    const qlt_nf4 *q = &w->nf4;
    gemv_weight gw = {q->codes, q->code, q->absmax, q->absmax_q, q->nested_absmax, q->nested_code, q->offset, 0};
    while ((1 << gw.log2_blocksize) < q->blocksize) gw.log2_blocksize++;
    cudaStream_t s = cuda_impl_of(be)->stream;
    if (q->double_quant) gemv_launch<true>(s, y, ldy, x, gw, w->rows, w->cols, bias, n);
    else gemv_launch<false>(s, y, ldy, x, gw, w->rows, w->cols, bias, n);
}
