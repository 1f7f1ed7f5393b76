/* nf4_rcp_table.c: where the GPU's rcp.approx.ftz.f32 (the instruction bitsandbytes' fast-math kernels
 * use for 1/absmax) differs from the correctly rounded 1.0f/x, so qlt_nf4_bnb_rcp reproduces it on the
 * host. Its result depends only on the input's mantissa (the exponent just shifts it); each entry is
 * (mantissa << 8) | (uint8_t)(int8_t)delta_ulps, sorted by mantissa.
 *
 * Generated on the GPU by `qlt_gpu_check nf4_rcp` (it writes this file under $QLT_NF4_RCP_OUT when the
 * table has to change); empty means every mantissa was measured correctly rounded, or not measured yet:
 * the nf4_rcp GPU check fails while the CPU emulation and the device disagree. */
#include <stdint.h>

const uint32_t qlt_nf4_rcp_exceptions[] = {0};
const int qlt_nf4_rcp_n_exceptions = 0;
