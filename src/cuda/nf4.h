/* nf4.h (cuda): NF4 quantize and dequantize on the GPU, callable from C. The bytes are identical to the
 * CPU reference (src/nf4/nf4.h), which is bit-exact with bitsandbytes; tests/gpu/check_nf4.c proves it.
 *
 * A device qlt_nf4 is the struct of backend/weight.h with every array in device memory (code[16] and
 * nested_code[256] included); offset stays a host field, passed to the kernels by value. Streams are
 * `void *` (a cudaStream_t; NULL = the default stream) so C files can include this header.
 * Functions return 0, or -1 with qlt_fail naming the failing CUDA call. */
#ifndef QLT_CUDA_NF4_H
#define QLT_CUDA_NF4_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/weight.h"
#include "common/dtype.h"

/* cudaMalloc's q's arrays for (numel, blocksize, double_quant) and uploads the NF4 codebook and the
 * dynamic map into q->code / q->nested_code. */
int qlt_cuda_nf4_alloc(qlt_nf4 *q, int64_t numel, int blocksize, int double_quant);
void qlt_cuda_nf4_free(qlt_nf4 *q);
/* Copies a host qlt_nf4 (e.g. read from a bitsandbytes checkpoint) into dev, allocated here. */
int qlt_cuda_nf4_upload(qlt_nf4 *dev, const qlt_nf4 *host);
/* Copies a device qlt_nf4 into a host one allocated with qlt_nf4_alloc_host for the same sizes. */
int qlt_cuda_nf4_download(qlt_nf4 *host, const qlt_nf4 *dev);

/* Device scratch bytes qlt_cuda_nf4_quantize needs (0 without double quant). */
size_t qlt_cuda_nf4_quantize_workspace(int64_t numel, int blocksize, int double_quant);
/* Quantizes q->numel values of x (device, F32 / F16 / BF16) into q (device arrays). With double quant the
 * offset is the deterministic mean computed on the device (the CPU reference's order), or
 * *offset_override when not NULL; the call then synchronizes the stream to store it in q->offset. */
int qlt_cuda_nf4_quantize(qlt_nf4 *q, const void *x, qlt_dtype dtype, void *workspace, const float *offset_override,
                          void *stream);
/* out[q->numel] (device, F32 / BF16 / F16) = dequantized q. Asynchronous; no allocation, no sync (safe
 * inside a captured graph). Memory-bound: 16-byte loads and stores when out and q->codes are 16-byte
 * aligned. */
int qlt_cuda_nf4_dequantize(const qlt_nf4 *q, void *out, qlt_dtype out_dtype, void *stream);
/* The same into rows of `cols` values `ld` elements apart (the weight is [numel / cols, cols]; cols % 8 == 0
 * when ld > cols): a weight dequantized into a wider matrix, e.g. with room for LoRA columns. */
int qlt_cuda_nf4_dequantize_rows(const qlt_nf4 *q, void *out, qlt_dtype out_dtype, int64_t cols, int64_t ld,
                                 void *stream);

/* For the checks: out[i] = rcp.approx.ftz.f32(in[i]) on the device (what bitsandbytes computes for
 * 1/absmax). */
int qlt_cuda_nf4_rcp(float *out, const float *in, int64_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
