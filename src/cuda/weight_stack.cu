/* weight_stack.cu: k frozen weights with the same columns read as one [sum rows, cols] matrix (q/k/v,
 * gate+up), so one GEMM covers them: dequantized (NF4) or copied (bf16) side by side into the scratch, with
 * room for adapter columns or rows folded in by the LoRA group ops (lora.cu), or found kept whole in the
 * dequant cache (weight_cache.cu). */
#include "cuda/cuda_common.h"

#include "cuda/nf4.h"

int qlt_cuda_weight_stack_prepare(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols) {
    for (int i = 0; i < k; i++) QLT_ASSERT(w[i]->cols == w[0]->cols);
    qlt_cuda_cache_announce(be, w, k, extra_cols);
    if (k == 1 && extra_cols == 0) return 0;
    return qlt_cuda_reserve_dequant(be, qlt_stack_rows(w, k) * (w[0]->cols + extra_cols));
}

void qlt_cuda_stack_fill(qlt_backend *be, bf16 *dst, const qlt_weight *const *w, int k, int64_t ld) {
    cuda_impl *impl = cuda_impl_of(be);
    const int64_t cols = w[0]->cols;
    for (int i = 0; i < k; i++) {
        QLT_ASSERT(w[i]->cols == cols);
        if (w[i]->format == QLT_WFORMAT_NF4) {
            qlt_phase was = impl->phase;
            if (be->phase) be->phase(be, QLT_PHASE_DEQUANT);
            QLT_ASSERT(qlt_cuda_nf4_dequantize_rows(&w[i]->nf4, dst, QLT_DTYPE_BF16, cols, ld, impl->stream) == 0);
            if (be->phase) be->phase(be, was);
        } else {
            QLT_ASSERT(w[i]->format == QLT_WFORMAT_BF16);
            qlt_cuda_copy_rows(impl->stream, dst, ld, (const bf16 *)w[i]->data, cols, w[i]->rows, cols);
        }
        dst += w[i]->rows * ld;
    }
}

/* The weights dequantized (NF4) or copied (bf16) side by side into impl->dequant, rows of stride ld, with room
 * for extra_rows more rows after them (reserved at load); *rows = their rows. */
static bf16 *stack_into_dequant(qlt_backend *be, const qlt_weight *const *w, int k, int64_t ld, int64_t extra_rows,
                                int64_t *rows) {
    QLT_ASSERT(k >= 1 && k <= QLT_STACK_MAX);
    *rows = qlt_stack_rows(w, k);
    cuda_impl *impl = cuda_impl_of(be);
    QLT_ASSERT((*rows + extra_rows) * ld <= impl->dequant_elems && ld >= w[0]->cols); /* reserved at load */
    qlt_cuda_stack_fill(be, impl->dequant, w, k, ld);
    return impl->dequant;
}

const bf16 *qlt_cuda_stack_bf16(qlt_backend *be, const qlt_weight *const *w, int k, int64_t *ld, int64_t *rows) {
    if (k == 1 && *ld == w[0]->cols) {
        *rows = w[0]->rows;
        return qlt_cuda_weight_bf16(be, w[0]);
    }
    int64_t kept_ld;
    const bf16 *kept = qlt_cuda_cache_stack(be, w, k, *ld, 0, 0, &kept_ld);
    if (kept) {
        *rows = qlt_stack_rows(w, k);
        *ld = kept_ld;
        return kept;
    }
    return stack_into_dequant(be, w, k, *ld, 0, rows);
}

bf16 *qlt_cuda_stack_bf16_room(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_rows, int64_t *rows) {
    int64_t kept_ld;
    bf16 *kept = qlt_cuda_cache_stack(be, w, k, w[0]->cols, 1, extra_rows, &kept_ld);
    if (kept) {
        *rows = qlt_stack_rows(w, k);
        return kept;
    }
    return stack_into_dequant(be, w, k, w[0]->cols, extra_rows, rows);
}
