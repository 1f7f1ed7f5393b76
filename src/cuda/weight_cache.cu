/* weight_cache.cu: frozen weights kept dequantized between steps (train.dequant_cache_gib, be->dequant_cache_bytes).
 *
 * Without the cache every frozen GEMM first writes its weight as bf16 into the one scratch (impl->dequant):
 * NF4 dequantized, or a stack (gate+up, k+v) copied side by side: a pass over every weight each time it is
 * used, a large share of a step at small micro-batches. With it, each stack the linear ops ask for gets its own buffer the first time it is asked
 * for outside a graph capture, as long as the budget lasts, and later uses read that buffer: the same bf16
 * values, written once. An entry has the layout the ops want:
 *   [rows + room, ld] bf16, the stack's weights in rows [0, rows) and columns [0, cols);
 *   ld = cols + the extra columns weight_stack_prepare announced for the stack (the adapters' columns that
 *   linear_lora_fwd folds in; a request for fewer columns reads the same rows with this stride);
 *   room rows after the weights for the backward's folded [W; A3] (lora.cu), as many as asked for.
 * Columns cols.. and the room rows belong to the entry's callers, who rewrite them each use.
 * A single weight inside a stack entry of stride cols is read from there (k and v inside [k; v]).
 * Until a lookup has happened inside a capture (so no graph can hold an entry's address), an entry that must
 * grow (more room) is replaced, and single-weight entries that a new stack entry holds are freed; after it,
 * nothing is freed before the weights are (a miss then makes a new entry beside the old one).
 * Nothing is evicted: weights are frozen; an entry goes when one of its weights is freed. */
#include "cuda/cuda_common.h"

#include <string.h>

/* Which weights, in order, a stack is (its identity in both lists below) */
typedef struct stack_key {
    const qlt_weight *w[QLT_STACK_MAX];
    int k;
} stack_key;

typedef struct cuda_cached_stack {
    stack_key key;
    int64_t rows, cols, ld, room; /* [rows + room, ld] */
    bf16 *data;
} cuda_cached_stack;

typedef struct cuda_stack_extra {
    stack_key key;
    int64_t extra_cols;
} cuda_stack_extra;

struct qlt_cuda_weight_cache {
    cuda_cached_stack *entries;
    int n, cap;
    cuda_stack_extra *extras; /* what weight_stack_prepare announced */
    int n_extras, cap_extras;
    int64_t bytes;  /* held by the entries */
    int captured;   /* a lookup happened inside a capture: a graph may hold entries' addresses */
    int full_noted;  /* the budget or the device ran out (said once) */
    int device_full; /* the device had too little free memory for an entry: no more are made */
};

static qlt_cuda_weight_cache *cache_of(qlt_backend *be) {
    cuda_impl *impl = cuda_impl_of(be);
    if (!impl->wcache) impl->wcache = (qlt_cuda_weight_cache *)qlt_xcalloc(1, sizeof(qlt_cuda_weight_cache));
    return impl->wcache;
}

static stack_key key_of(const qlt_weight *const *w, int k) {
    stack_key key;
    memset(&key, 0, sizeof key);
    for (int i = 0; i < k; i++) key.w[i] = w[i];
    key.k = k;
    return key;
}

static bool same_stack(const stack_key *a, const qlt_weight *const *w, int k) {
    if (a->k != k) return false;
    for (int i = 0; i < k; i++)
        if (a->w[i] != w[i]) return false;
    return true;
}

static bool key_holds(const stack_key *a, const qlt_weight *w) {
    for (int j = 0; j < a->k; j++)
        if (a->w[j] == w) return true;
    return false;
}

void qlt_cuda_cache_announce(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols) {
    if (cuda_impl_of(be)->plan.on) return; /* planned weights are not cached */
    qlt_cuda_weight_cache *c = cache_of(be);
    for (int i = 0; i < c->n_extras; i++)
        if (same_stack(&c->extras[i].key, w, k)) {
            if (extra_cols > c->extras[i].extra_cols) c->extras[i].extra_cols = extra_cols;
            return;
        }
    if (c->n_extras == c->cap_extras) {
        c->cap_extras = c->cap_extras ? 2 * c->cap_extras : 64;
        c->extras = (cuda_stack_extra *)qlt_xrealloc(c->extras, sizeof(cuda_stack_extra) * (size_t)c->cap_extras);
    }
    c->extras[c->n_extras++] = (cuda_stack_extra){key_of(w, k), extra_cols};
}

static int64_t announced_extra(const qlt_cuda_weight_cache *c, const qlt_weight *const *w, int k) {
    for (int i = 0; i < c->n_extras; i++)
        if (same_stack(&c->extras[i].key, w, k)) return c->extras[i].extra_cols;
    return 0;
}

static int64_t entry_bytes(const cuda_cached_stack *e) { return (int64_t)sizeof(bf16) * (e->rows + e->room) * e->ld; }


/* Frees entry i (the last entry takes its place). cudaFree waits for the device, so the stream's earlier uses
 * of it are done. */
static void entry_free(qlt_backend *be, qlt_cuda_weight_cache *c, int i) {
    qlt_cuda_free_tracked(be, c->entries[i].data, (size_t)entry_bytes(&c->entries[i]));
    c->bytes -= entry_bytes(&c->entries[i]);
    c->entries[i] = c->entries[--c->n];
}

/* A new entry for the stack, filled (stream-ordered); NULL when the budget (or the device) has no room for it.
 * `old`: an entry of the same stack too small for this request, or NULL. The new entry replaces it when it can
 * serve whatever `old` served (the same stride, at least its room) and no graph may hold its address; otherwise
 * both stay, so no two requests can keep replacing each other's entry. */
static cuda_cached_stack *cache_add(qlt_backend *be, qlt_cuda_weight_cache *c, const qlt_weight *const *w, int k,
                                    int64_t ld_min, int ld_exact, int64_t extra_rows, const cuda_cached_stack *old) {
    const int64_t cols = w[0]->cols;
    const int64_t rows = qlt_stack_rows(w, k);
    int64_t ld = ld_min, room = extra_rows;
    if (!ld_exact && cols + announced_extra(c, w, k) > ld) ld = cols + announced_extra(c, w, k);
    if (old && !ld_exact && old->ld > ld) ld = old->ld;
    const bool replace = old && old->ld == ld && !c->captured;
    if (replace && old->room > room) room = old->room;
    const int64_t bytes = (int64_t)sizeof(bf16) * (rows + room) * ld;
    /* what the libraries may still allocate later (cuDNN's workspace, cuBLAS's) keeps a margin free */
    const size_t margin = (size_t)512 << 20;
    size_t free_bytes = 0, total_bytes = 0;
    const int64_t freed = replace ? entry_bytes(old) : 0; /* the old entry goes first */
    const bool in_budget = c->bytes - freed + bytes <= be->dequant_cache_bytes;
    /* the device is asked only within the budget, and not again once it was short (each miss of an eager
     * step would ask otherwise) */
    const bool on_device = in_budget && !c->device_full && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess &&
                           free_bytes + (size_t)freed >= (size_t)bytes + margin;
    if (in_budget && !on_device) c->device_full = 1;
    if (!on_device) {
        if (!c->full_noted)
            fprintf(stderr, "qlora-train: train.dequant_cache_gib: %.2f GiB of weights kept dequantized, the rest "
                            "dequantized at each use (%s)\n",
                    c->bytes / 1073741824.0, in_budget ? "the GPU's memory is full" : "the budget is reached");
        c->full_noted = 1;
        return NULL;
    }
    if (freed) entry_free(be, c, (int)(old - c->entries));
    bf16 *data = (bf16 *)qlt_cuda_alloc_tracked(be, (size_t)bytes);
    if (!data) return NULL;
    /* a stack of stride cols holds its weights for single-weight reads too: their own entries go */
    const stack_key key = key_of(w, k);
    if (k > 1 && ld == cols && !c->captured)
        for (int i = c->n - 1; i >= 0; i--)
            if (c->entries[i].key.k == 1 && c->entries[i].room == 0 && key_holds(&key, c->entries[i].key.w[0]))
                entry_free(be, c, i);
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->entries = (cuda_cached_stack *)qlt_xrealloc(c->entries, sizeof(cuda_cached_stack) * (size_t)c->cap);
    }
    cuda_cached_stack *e = &c->entries[c->n++];
    *e = (cuda_cached_stack){key, rows, cols, ld, room, data};
    c->bytes += bytes;
    qlt_cuda_stack_fill(be, data, w, k, ld);
    return e;
}

bf16 *qlt_cuda_cache_stack(qlt_backend *be, const qlt_weight *const *w, int k, int64_t ld_min, int ld_exact,
                           int64_t extra_rows, int64_t *ld) {
    cuda_impl *impl = cuda_impl_of(be);
    if (be->dequant_cache_bytes <= 0) return NULL;
    qlt_cuda_weight_cache *c = cache_of(be);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(impl->stream, &status));
    const bool capturing = status != cudaStreamCaptureStatusNone;
    if (capturing) c->captured = 1; /* from now on a graph may hold what this returns */
    const cuda_cached_stack *same = NULL;
    for (int i = 0; i < c->n; i++) {
        const cuda_cached_stack *e = &c->entries[i];
        if (!same_stack(&e->key, w, k)) continue;
        if ((ld_exact ? e->ld == ld_min : e->ld >= ld_min) && e->room >= extra_rows) {
            *ld = e->ld;
            return e->data;
        }
        same = e;
    }
    /* a single weight, stride cols, no room: its rows inside a stack entry of that stride */
    if (k == 1 && ld_min == w[0]->cols && extra_rows == 0)
        for (int i = 0; i < c->n; i++) {
            const cuda_cached_stack *e = &c->entries[i];
            if (e->ld != w[0]->cols || !key_holds(&e->key, w[0])) continue;
            int64_t row0 = 0;
            for (int j = 0; e->key.w[j] != w[0]; j++) row0 += e->key.w[j]->rows;
            *ld = e->ld;
            return e->data + row0 * e->ld;
        }
    if (capturing) return NULL; /* no allocation inside a capture */
    const cuda_cached_stack *made = cache_add(be, c, w, k, ld_min, ld_exact, extra_rows, same);
    if (!made) return NULL;
    *ld = made->ld;
    return made->data;
}

void qlt_cuda_cache_drop(qlt_backend *be, const qlt_weight *w) {
    qlt_cuda_weight_cache *c = cuda_impl_of(be)->wcache;
    if (!c) return;
    for (int i = c->n - 1; i >= 0; i--)
        if (key_holds(&c->entries[i].key, w)) entry_free(be, c, i);
    for (int i = c->n_extras - 1; i >= 0; i--)
        if (key_holds(&c->extras[i].key, w)) c->extras[i] = c->extras[--c->n_extras];
}

int64_t qlt_cuda_cache_bytes(qlt_backend *be) {
    const qlt_cuda_weight_cache *c = cuda_impl_of(be)->wcache;
    return c ? c->bytes : 0;
}

void qlt_cuda_cache_release(qlt_backend *be) {
    cuda_impl *impl = cuda_impl_of(be);
    qlt_cuda_weight_cache *c = impl->wcache;
    if (!c) return;
    for (int i = 0; i < c->n; i++) qlt_cuda_free_tracked(be, c->entries[i].data, (size_t)entry_bytes(&c->entries[i]));
    free(c->entries);
    free(c->extras);
    free(c);
    impl->wcache = NULL;
}
