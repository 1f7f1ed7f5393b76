/* attention_fwd_wgmma.h: the Hopper (wgmma) attention forward for head_dim 128 (attention_fwd_wgmma.cu), a
 * measured variant of the product's mma.sync forward kept as a tool (attention_wgmma_probe.cu; docs/PERF.md
 * says why it left the product). Layouts and outputs as src/cuda/attention.cu's forward: q/out [B*S, n_heads*128], k/v [B*S, n_kv*128], lse [B*S, n_heads]. */
#ifndef QLT_CUDA_ATTENTION_FWD_WGMMA_H
#define QLT_CUDA_ATTENTION_FWD_WGMMA_H

#include "cuda/cuda_common.h"

/* true when the wgmma forward can run: head_dim 128 on a compute capability 9.0 device */
bool qlt_attn_fwd_wgmma_usable(int head_dim);
void qlt_attn_fwd_wgmma(cudaStream_t s, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                        const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv, float scale);

#endif
