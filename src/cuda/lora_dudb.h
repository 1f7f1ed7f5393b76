/* lora_dudb.h: the LoRA backward's du and dB in one pass over dy (lora_dudb.cu), called by lora.cu. */
#ifndef QLT_CUDA_LORA_DUDB_H
#define QLT_CUDA_LORA_DUDB_H

#include "cuda/cuda_common.h"

/* Whether the fused kernel takes this group: r in {8, 16, 32, 64}, every out and ld a multiple of 8, dy
 * 16-byte aligned. */
bool qlt_cuda_lora_dudb_fits(const qlt_lora_site *sites, int k, int r);

/* du [n, k r] = scale dy_i B_i (fp32, overwritten) and dB_i += scale dy_i^T u_i for the k sites, with
 * b3[i] = B3_i [out_i, 3r] bf16 ([bh | bl | bh], lora.cu's operand copy) and u [n, k r] fp32; when tok is
 * not NULL, also tok [n, ld_tok] = per site [lo | hi | hi] of du (lora.cu's T3). Uses impl->lora_acc for
 * its partial sums. Returns false (and does nothing) when the group does not fit the kernel or the
 * workspace. */
bool qlt_cuda_lora_dudb(qlt_backend *be, const qlt_lora_site *sites, int k, const bf16 *const *b3, float *du,
                        bf16 *tok, int64_t ld_tok, const float *u, int64_t n, int r, float scale);

#endif
