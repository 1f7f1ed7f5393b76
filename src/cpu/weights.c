/* weights.c: the CPU backend's frozen weights: creating them (float32, or quantized to NF4 on the host),
 * taking over NF4 weights already quantized, freeing them, and handing the linear ops a float32 view: the
 * stored array, a copy kept dequantized within train.dequant_cache_gib, or NF4 dequantized into one scratch
 * buffer before each use. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "cpu/backend_cpu_internal.h"
#include "nf4/nf4.h"

/* What qlt_nf4_alloc_host holds for q: codes, the 16-entry codebook, and the absmax (float32 [nblocks], or
 * uint8 [nblocks] + nested float32 absmax + the 256-entry nested map). */
static int64_t nf4_host_bytes(const qlt_nf4 *q) {
    int64_t bytes = (q->numel + 1) / 2 + (int64_t)sizeof(float) * 16;
    if (q->double_quant) bytes += q->nblocks + (int64_t)sizeof(float) * (q->nested_nblocks + 256);
    else bytes += (int64_t)sizeof(float) * q->nblocks;
    return bytes;
}

int64_t qlt_cpu_dequant_cache_held(qlt_backend *be) { return ((qlt_cpu_impl *)be->impl)->cache_bytes; }

void qlt_cpu_weights_release(qlt_backend *be) {
    qlt_cpu_impl *impl = be->impl;
    free(impl->dequant);
    for (int i = 0; i < impl->n_cache; i++) free(impl->cache[i].data);
    free(impl->cache);
    impl->dequant = NULL;
    impl->cache = NULL;
    impl->n_cache = impl->cap_cache = 0;
}

/* w's entry in the dequantized-weight cache, or -1 */
static int cache_find(const qlt_cpu_impl *impl, const qlt_weight *w) {
    for (int i = 0; i < impl->n_cache; i++)
        if (impl->cache[i].w == w) return i;
    return -1;
}

/* A new cache entry for NF4 weight w when the budget has room (NULL otherwise: w is dequantized each use). */
static float *cache_add(qlt_backend *be, const qlt_weight *w) {
    qlt_cpu_impl *impl = be->impl;
    const int64_t bytes = (int64_t)sizeof(float) * w->rows * w->cols;
    if (impl->cache_bytes + bytes > be->dequant_cache_bytes) return NULL;
    /* what the host has free, less a margin, bounds a large budget (malloc would overcommit) */
    const int64_t avail = (int64_t)sysconf(_SC_AVPHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
    if (avail > 0 && bytes + ((int64_t)512 << 20) > avail) return NULL;
    float *data = malloc((size_t)bytes);
    if (!data) return NULL;
    if (impl->n_cache == impl->cap_cache) {
        impl->cap_cache = impl->cap_cache ? 2 * impl->cap_cache : 64;
        impl->cache = qlt_xrealloc(impl->cache, sizeof *impl->cache * (size_t)impl->cap_cache);
    }
    impl->cache[impl->n_cache++] = (qlt_cpu_cached_weight){w, data};
    impl->cache_bytes += bytes;
    qlt_cpu_track(impl, bytes);
    return data;
}

static void cache_drop(qlt_backend *be, const qlt_weight *w) {
    qlt_cpu_impl *impl = be->impl;
    int i = cache_find(impl, w);
    if (i < 0) return;
    const int64_t bytes = (int64_t)sizeof(float) * w->rows * w->cols;
    free(impl->cache[i].data);
    impl->cache[i] = impl->cache[--impl->n_cache];
    impl->cache_bytes -= bytes;
    qlt_cpu_track(impl, -bytes);
}

const float *qlt_cpu_weight_f32(qlt_backend *be, const qlt_weight *w) {
    if (w->format == QLT_WFORMAT_F32) return w->data;
    QLT_ASSERT(w->format == QLT_WFORMAT_NF4);
    qlt_cpu_impl *impl = be->impl;
    int cached = cache_find(impl, w);
    if (cached >= 0) return impl->cache[cached].data;
    float *dst = be->dequant_cache_bytes > 0 ? cache_add(be, w) : NULL;
    if (!dst) {
        QLT_ASSERT(w->rows * w->cols <= impl->dequant_cap);
        dst = impl->dequant;
    }
    qlt_phase was = impl->current;
    qlt_cpu_phase(be, QLT_PHASE_DEQUANT);
    qlt_nf4_dequantize_f32(&w->nf4, dst);
    qlt_cpu_phase(be, was);
    return dst;
}

/* Grows the dequantization scratch at load time (never inside a step). */
static int reserve_dequant(qlt_backend *be, int64_t numel) {
    qlt_cpu_impl *impl = be->impl;
    if (impl->plan.on) { /* note the size only */
        if (numel > impl->plan.dequant_cap) impl->plan.dequant_cap = numel;
        return 0;
    }
    if (numel > impl->dequant_cap) {
        qlt_cpu_track(impl, -(int64_t)sizeof(float) * impl->dequant_cap);
        impl->dequant = qlt_xrealloc(impl->dequant, sizeof(float) * (size_t)numel);
        impl->dequant_cap = numel;
        qlt_cpu_track(impl, (int64_t)sizeof(float) * numel);
    }
    return 0;
}

int qlt_cpu_weight_create(qlt_backend *be, qlt_weight *w, const void *host, qlt_dtype dtype, int64_t rows,
                          int64_t cols, int nf4_blocksize, int double_quant) {
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    int64_t numel = rows * cols;
    const int planning = ((qlt_cpu_impl *)be->impl)->plan.on; /* shapes and bytes only (backend.h plan_begin) */
    if (nf4_blocksize <= 0) { /* float32, converted straight into the weight's own memory */
        w->format = QLT_WFORMAT_F32;
        w->data = be->alloc(be, sizeof(float) * (size_t)numel);
        if (!w->data) return qlt_fail("out of host memory for a [%lld, %lld] weight", (long long)rows, (long long)cols);
        if (!planning) qlt_convert_to_f32(w->data, host, dtype, (size_t)numel);
        return 0;
    }
    QLT_TRY(qlt_nf4_check_blocksize(nf4_blocksize));
    w->format = QLT_WFORMAT_NF4;
    if (planning) {
        QLT_TRY(qlt_nf4_shape(&w->nf4, numel, nf4_blocksize, double_quant));
        qlt_cpu_track(be->impl, nf4_host_bytes(&w->nf4));
        return reserve_dequant(be, numel);
    }
    QLT_TRY(qlt_nf4_alloc_host(&w->nf4, numel, nf4_blocksize, double_quant));
    qlt_cpu_track(be->impl, nf4_host_bytes(&w->nf4));
    /* float32 first: the stored tensor may sit unaligned in the mapped file */
    float *dense = qlt_xmalloc(sizeof(float) * (size_t)numel);
    qlt_convert_to_f32(dense, host, dtype, (size_t)numel);
    qlt_nf4_quantize_f32(&w->nf4, dense);
    free(dense);
    return reserve_dequant(be, numel);
}

int qlt_cpu_weight_from_nf4(qlt_backend *be, qlt_weight *w, qlt_nf4 *host, int64_t rows, int64_t cols) {
    memset(w, 0, sizeof *w);
    w->format = QLT_WFORMAT_NF4;
    w->rows = rows;
    w->cols = cols;
    w->nf4 = *host;
    memset(host, 0, sizeof *host);
    qlt_cpu_track(be->impl, nf4_host_bytes(&w->nf4));
    return reserve_dequant(be, rows * cols);
}

void qlt_cpu_weight_free(qlt_backend *be, qlt_weight *w) {
    cache_drop(be, w);
    if (w->format == QLT_WFORMAT_NF4) {
        qlt_cpu_track(be->impl, -nf4_host_bytes(&w->nf4));
        qlt_nf4_free_host(&w->nf4);
    } else {
        be->free(be, w->data);
    }
    memset(w, 0, sizeof *w);
}

/* The stack runs weight by weight into its columns of y (no side-by-side copy is needed). */
int qlt_cpu_weight_stack_prepare(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols) {
    for (int i = 1; i < k; i++) QLT_ASSERT(w[i]->cols == w[0]->cols);
    return 0;
}
