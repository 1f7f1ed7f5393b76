/* weight_cache.cu: frozen weights kept dequantized between steps (train.dequant_cache_gib, be->dequant_cache_bytes).
 *
 * Without the cache every frozen GEMM first writes its weight as bf16 into the one scratch (impl->dequant):
 * NF4 dequantized, or a stack (gate+up, k+v) copied side by side. At micro-batch 1 on a 7B model that is ~11%
 * of an H100 step. With it, each stack the linear ops ask for gets its own buffer the first time it is asked
 * for outside a graph capture, as long as the budget lasts, and later uses read that buffer: the same bf16
 * values, written once. An entry has the layout the ops want:
 *   [rows + room, ld] bf16, the stack's weights in rows [0, rows) and columns [0, cols);
 *   ld = cols + the extra columns weight_stack_prepare announced for the stack (the adapters' columns that
 *   linear_lora_fwd folds in; a request for fewer columns reads the same rows with this stride);
 *   room rows after the weights (entries with ld == cols) for the backward's folded [W; A3] (lora.cu).
 * Columns cols.. and the room rows belong to the entry's callers, who rewrite them each use.
 * Nothing is evicted: weights are frozen; an entry goes when one of its weights is freed. */
#include "cuda/cuda_common.h"

#include "cuda/nf4.h"

#include <string.h>

typedef struct cuda_cached_stack {
    const qlt_weight *w[QLT_STACK_MAX];
    int k;
    int64_t rows, cols, ld, room; /* [rows + room, ld] */
    bf16 *data;
} cuda_cached_stack;

typedef struct cuda_stack_extra {
    const qlt_weight *w[QLT_STACK_MAX];
    int k;
    int64_t extra_cols;
} cuda_stack_extra;

struct qlt_cuda_weight_cache {
    cuda_cached_stack *entries;
    int n, cap;
    cuda_stack_extra *extras; /* what weight_stack_prepare announced */
    int n_extras, cap_extras;
    int64_t bytes;     /* held by the entries */
    int64_t room_rows; /* the most rows a backward fold appends (lora_group_prepare) */
    int full_noted;    /* the budget ran out (said once) */
};

static qlt_cuda_weight_cache *cache_of(qlt_backend *be) {
    cuda_impl *impl = cuda_impl_of(be);
    if (!impl->wcache) impl->wcache = (qlt_cuda_weight_cache *)qlt_xcalloc(1, sizeof(qlt_cuda_weight_cache));
    return impl->wcache;
}

static bool same_stack(const qlt_weight *const *a, int ka, const qlt_weight *const *w, int k) {
    if (ka != k) return false;
    for (int i = 0; i < k; i++)
        if (a[i] != w[i]) return false;
    return true;
}

void qlt_cuda_cache_announce(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols) {
    qlt_cuda_weight_cache *c = cache_of(be);
    for (int i = 0; i < c->n_extras; i++)
        if (same_stack(c->extras[i].w, c->extras[i].k, w, k)) {
            if (extra_cols > c->extras[i].extra_cols) c->extras[i].extra_cols = extra_cols;
            return;
        }
    if (c->n_extras == c->cap_extras) {
        c->cap_extras = c->cap_extras ? 2 * c->cap_extras : 64;
        c->extras = (cuda_stack_extra *)qlt_xrealloc(c->extras, sizeof(cuda_stack_extra) * (size_t)c->cap_extras);
    }
    cuda_stack_extra *e = &c->extras[c->n_extras++];
    memset(e, 0, sizeof *e);
    for (int i = 0; i < k; i++) e->w[i] = w[i];
    e->k = k;
    e->extra_cols = extra_cols;
}

void qlt_cuda_cache_room(qlt_backend *be, int64_t rows) {
    qlt_cuda_weight_cache *c = cache_of(be);
    if (rows > c->room_rows) c->room_rows = rows;
}

static int64_t announced_extra(const qlt_cuda_weight_cache *c, const qlt_weight *const *w, int k) {
    for (int i = 0; i < c->n_extras; i++)
        if (same_stack(c->extras[i].w, c->extras[i].k, w, k)) return c->extras[i].extra_cols;
    return 0;
}

/* A new entry for the stack, filled (stream-ordered); NULL when caching is off, the stream is being captured,
 * or the budget (or the device) has no room for it. */
static cuda_cached_stack *cache_add(qlt_backend *be, const qlt_weight *const *w, int k, int64_t ld_min, int ld_exact,
                                    int64_t extra_rows) {
    cuda_impl *impl = cuda_impl_of(be);
    if (be->dequant_cache_bytes <= 0) return NULL;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(impl->stream, &status));
    if (status != cudaStreamCaptureStatusNone) return NULL; /* no allocation inside a captured step */
    qlt_cuda_weight_cache *c = cache_of(be);
    const int64_t cols = w[0]->cols;
    int64_t rows = 0;
    for (int i = 0; i < k; i++) rows += w[i]->rows;
    int64_t ld = ld_min;
    if (!ld_exact && cols + announced_extra(c, w, k) > ld) ld = cols + announced_extra(c, w, k);
    /* room for a backward fold only where the fold can use it: its [W; A3] has stride cols */
    const int64_t room = ld == cols ? (extra_rows > c->room_rows ? extra_rows : c->room_rows) : 0;
    if (extra_rows > room) return NULL;
    const int64_t bytes = (int64_t)sizeof(bf16) * (rows + room) * ld;
    /* what the libraries may still allocate later (cuDNN's workspace, cuBLAS's) keeps a margin free */
    const size_t margin = (size_t)512 << 20;
    size_t free_bytes = 0, total_bytes = 0;
    const bool in_budget = c->bytes + bytes <= be->dequant_cache_bytes;
    const bool on_device = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess && free_bytes >= (size_t)bytes + margin;
    bf16 *data = in_budget && on_device ? (bf16 *)qlt_cuda_alloc_tracked(be, (size_t)bytes) : NULL;
    if (!data) {
        if (!c->full_noted)
            fprintf(stderr, "qlora-train: train.dequant_cache_gib: %.2f GiB of weights kept dequantized, the rest "
                            "dequantized at each use (%s)\n",
                    c->bytes / 1073741824.0, in_budget ? "the GPU's memory is full" : "the budget is reached");
        c->full_noted = 1;
        return NULL;
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->entries = (cuda_cached_stack *)qlt_xrealloc(c->entries, sizeof(cuda_cached_stack) * (size_t)c->cap);
    }
    cuda_cached_stack *e = &c->entries[c->n++];
    memset(e, 0, sizeof *e);
    for (int i = 0; i < k; i++) e->w[i] = w[i];
    e->k = k, e->rows = rows, e->cols = cols, e->ld = ld, e->room = room, e->data = data;
    c->bytes += bytes;
    const qlt_phase was = impl->phase;
    if (be->phase) be->phase(be, QLT_PHASE_DEQUANT);
    bf16 *dst = data;
    for (int i = 0; i < k; i++) {
        if (w[i]->format == QLT_WFORMAT_NF4)
            QLT_ASSERT(qlt_cuda_nf4_dequantize_rows(&w[i]->nf4, dst, QLT_DTYPE_BF16, cols, ld, impl->stream) == 0);
        else
            qlt_cuda_copy_rows(impl->stream, dst, ld, (const bf16 *)w[i]->data, cols, w[i]->rows, cols);
        dst += w[i]->rows * ld;
    }
    if (be->phase) be->phase(be, was);
    return e;
}

bf16 *qlt_cuda_cache_stack(qlt_backend *be, const qlt_weight *const *w, int k, int64_t ld_min, int ld_exact,
                           int64_t extra_rows, int64_t *ld) {
    cuda_impl *impl = cuda_impl_of(be);
    if (be->dequant_cache_bytes <= 0 && !impl->wcache) return NULL;
    qlt_cuda_weight_cache *c = cache_of(be);
    cuda_cached_stack *hit = NULL;
    for (int i = 0; i < c->n && !hit; i++) {
        cuda_cached_stack *e = &c->entries[i];
        if (same_stack(e->w, e->k, w, k) && (ld_exact ? e->ld == ld_min : e->ld >= ld_min) && e->room >= extra_rows)
            hit = e;
    }
    if (!hit) hit = cache_add(be, w, k, ld_min, ld_exact, extra_rows);
    if (!hit) return NULL;
    *ld = hit->ld;
    return hit->data;
}

void qlt_cuda_cache_drop(qlt_backend *be, const qlt_weight *w) {
    qlt_cuda_weight_cache *c = cuda_impl_of(be)->wcache;
    if (!c) return;
    for (int i = c->n - 1; i >= 0; i--) {
        cuda_cached_stack *e = &c->entries[i];
        bool holds = false;
        for (int j = 0; j < e->k; j++) holds = holds || e->w[j] == w;
        if (!holds) continue;
        const int64_t bytes = (int64_t)sizeof(bf16) * (e->rows + e->room) * e->ld;
        qlt_cuda_free_tracked(be, e->data, (size_t)bytes);
        c->bytes -= bytes;
        *e = c->entries[--c->n];
    }
    for (int i = c->n_extras - 1; i >= 0; i--) {
        bool holds = false;
        for (int j = 0; j < c->extras[i].k; j++) holds = holds || c->extras[i].w[j] == w;
        if (holds) c->extras[i] = c->extras[--c->n_extras];
    }
}

int64_t qlt_cuda_cache_bytes(qlt_backend *be) {
    const qlt_cuda_weight_cache *c = cuda_impl_of(be)->wcache;
    return c ? c->bytes : 0;
}

void qlt_cuda_cache_release(qlt_backend *be) {
    cuda_impl *impl = cuda_impl_of(be);
    qlt_cuda_weight_cache *c = impl->wcache;
    if (!c) return;
    for (int i = 0; i < c->n; i++)
        qlt_cuda_free_tracked(be, c->entries[i].data,
                              sizeof(bf16) * (size_t)((c->entries[i].rows + c->entries[i].room) * c->entries[i].ld));
    free(c->entries);
    free(c->extras);
    free(c);
    impl->wcache = NULL;
}
