/* embed.cu: the token embedding lookup, x [N, D] = table[ids[t], :] (bf16 rows copied as they are). */
#include "cuda/cuda_common.h"

static __global__ void embed_kernel(bf16 *x, const int32_t *ids, const bf16 *table, int64_t n, int64_t d) {
    int64_t t = blockIdx.x;
    const bf16 *src = table + (int64_t)ids[t] * d;
    bf16 *dst = x + t * d;
    if ((d & 7) == 0) {
        const uint4 *s4 = (const uint4 *)src;
        uint4 *d4 = (uint4 *)dst;
        for (int64_t i = threadIdx.x; i < d / 8; i += blockDim.x) d4[i] = s4[i];
    } else {
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = src[i];
    }
}

void qlt_cuda_embed(qlt_backend *be, void *x, const int32_t *ids, const qlt_weight *emb, int64_t n) {
    if (n <= 0) return;
    QLT_ASSERT(emb->format == QLT_WFORMAT_BF16);
    cudaStream_t s = cuda_impl_of(be)->stream;
    embed_kernel<<<(unsigned)n, 128, 0, s>>>((bf16 *)x, ids, (const bf16 *)emb->data, n, emb->cols);
    CUDA_CHECK_LAUNCH();
}
