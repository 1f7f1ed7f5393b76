/* nf4_gemm.h: the experiment of tools/nf4_gemm.cu (not used by qlora-train): GEMMs that read a frozen weight
 * stack straight from its NF4 blocks (Hopper, sm_90a). The dequantization happens in the GEMM's mainloop, on
 * a producer warpgroup that writes each bf16 tile of W into shared memory while two consumer warpgroups
 * multiply the previous ones (wgmma), so no bf16 copy of W is ever written to or read from global memory. The values fed to the tensor cores are exactly what
 * qlt_cuda_nf4_dequantize writes (bf16(mul.ftz(code, absmax))); only the fp32 accumulation order differs
 * from the dequantize + cuBLAS path.
 *
 * W is a stack of k NF4 weights [rows_i, cols] read as one [R, cols] matrix (R = sum rows_i), row-major.
 *   forward:  y [m, R] (ldy)          = x [m, cols] (ldx) . W^T
 *   backward: dx [m, cols] (lddx) = beta dx + dy [m, R] (lddy) . W
 * Streams are `void *` (a cudaStream_t) so C files can include this header. */
#ifndef QLT_CUDA_NF4_GEMM_H
#define QLT_CUDA_NF4_GEMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/weight.h"

#define QLT_NF4_GEMM_MAX_PARTS 3

/* 1 when the kernels run on this device and take this stack: compute capability 9.0, every part
 * blocksize 64, each part's rows a multiple of 64, cols a multiple of 256, 16-byte aligned codes; 0 if not. */
int qlt_cuda_nf4_gemm_ok(const qlt_nf4 *const *q, const int64_t *rows, int k, int64_t cols);

/* bn: the CTA's tile width (256 or 128; 0 picks). Asynchronous, no allocation: safe under graph capture.
 * Return 0, or -1 with qlt_fail when the stack is not one qlt_cuda_nf4_gemm_ok takes or a pointer / leading
 * dimension is not 16-byte aligned. */
int qlt_cuda_nf4_gemm_fwd(void *y, int64_t ldy, const void *x, int64_t ldx, int64_t m, const qlt_nf4 *const *q,
                          const int64_t *rows, int k, int64_t cols, int bn, void *stream);
int qlt_cuda_nf4_gemm_bwd(void *dx, int64_t lddx, const void *dy, int64_t lddy, int64_t m, const qlt_nf4 *const *q,
                          const int64_t *rows, int k, int64_t cols, float beta, int bn, void *stream);

/* The forward again by tools/nf4_gemm_rs.cu: W dequantized by the consumer warps into the A registers of a
 * register-A wgmma (C^T = W x^T), no bf16 tile of W in shared memory. Needs double quantization, each part's
 * rows % 128 == 0, cols % 256 == 0, and q's codes in the kernel's layout (qlt_cuda_nf4_gemm_rs_layout); 0, or
 * -1 with qlt_fail. */
int qlt_cuda_nf4_gemm_rs_fwd(void *y, int64_t ldy, const void *x, int64_t ldx, int64_t m, const qlt_nf4 *const *q,
                             const int64_t *rows, int k, int64_t cols, void *stream);
/* dst = src's NF4 codes (numel values) in qlt_cuda_nf4_gemm_rs_fwd's layout (asynchronous) */
int qlt_cuda_nf4_gemm_rs_layout(uint8_t *dst, const uint8_t *src, int64_t numel, void *stream);

#ifdef __cplusplus
}
#endif

#endif
