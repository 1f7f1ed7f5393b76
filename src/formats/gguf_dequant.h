/* gguf_dequant.h: ggml tensor types to float32, value for value as llama.cpp's reference dequantizers
 * (ggml-quants.c, dequantize_row_*) compute them: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
 * Q5_K, Q6_K. Every other ggml type is refused with an error naming the tensor and its type.
 *
 * Block layouts (bytes; d, m, dmin are float16 scales; values are row-major, a row of ne[0] values is
 * ne[0] / block consecutive blocks):
 *   Q4_0 [32 values, 18 B]: d, qs[16]             v = (nibble - 8) * d; byte j holds values j (low) and j+16 (high)
 *   Q4_1 [32, 20]: d, m, qs[16]                   v = nibble * d + m
 *   Q5_0 [32, 22]: d, qh[4], qs[16]               v = (nibble | bit << 4) - 16) * d; bit j of qh for value j
 *   Q5_1 [32, 24]: d, m, qh[4], qs[16]            v = (nibble | bit << 4) * d + m
 *   Q8_0 [32, 34]: d, qs[32] (int8)               v = q * d
 *   Q4_K [256, 144]: d, dmin, scales[12], qs[128] eight sub-blocks of 32, 6-bit scale sc and min mn each:
 *                                                 v = (d * sc) * nibble - (dmin * mn)
 *   Q5_K [256, 176]: d, dmin, scales[12], qh[32], qs[128]  as Q4_K with a fifth bit from qh
 *   Q6_K [256, 210]: ql[128], qh[64], scales[16] (int8), d  sixteen sub-blocks of 16: v = (d * sc) * (q - 32) */
#ifndef QLT_GGUF_DEQUANT_H
#define QLT_GGUF_DEQUANT_H

#include <stdint.h>

#include "formats/gguf.h"

/* True when qlt_gguf_dequantize handles ggml type `type`. */
int qlt_gguf_can_dequantize(uint32_t type);
/* dst [n] = the n values at src of ggml type `type` (one qlt_gguf_can_dequantize accepts; n a multiple of
 * its block). Blocks are independent, so the work is split across OpenMP threads with the same result. */
void qlt_gguf_dequantize(uint32_t type, const void *src, float *dst, int64_t n);
/* dst [t->numel] = tensor t of g as float32; -1 with qlt_fail naming the file, the tensor and its type
 * when the type has no dequantizer. */
int qlt_gguf_tensor_to_f32(const qlt_gguf *g, const qlt_gguf_tensor *t, float *dst);

#endif
