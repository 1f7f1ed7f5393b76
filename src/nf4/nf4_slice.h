/* nf4_slice.h: a run of consecutive values of an NF4 tensor as an NF4 tensor of its own, holding the same
 * dequantized values. Phi-3's fused qkv_proj / gate_up_proj are quantized whole (as bitsandbytes quantizes the
 * fused Linear: one absmax mean for the double quantization) and then split into q, k, v / gate, up. */
#ifndef QLT_NF4_SLICE_H
#define QLT_NF4_SLICE_H

#include <stdint.h>

#include "nf4/nf4.h"

/* part (allocated here, host) = values [start, start + numel) of whole. start must be a multiple of the
 * blocksize, and numel too unless the slice ends the tensor. With double quantization the part keeps it when
 * its first block starts a nested block (of 256); otherwise it holds the dequantized float32 absmax of its
 * blocks (double_quant 0), which dequantizes to the same values. 0, or -1 with qlt_fail. */
int qlt_nf4_slice(const qlt_nf4 *whole, int64_t start, int64_t numel, qlt_nf4 *part);

#endif
