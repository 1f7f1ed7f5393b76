/* backend_cpu.c: the CPU reference backend: the qlt_backend table over the float32 ops of cpu_ops.h.
 * Activations are float32 host memory; frozen weights are float32, or NF4 dequantized into a scratch
 * buffer on every use (never kept in float32). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "common/clock.h"
#include "common/error.h"
#include "cpu/backend_cpu.h"
#include "cpu/cpu_ops.h"
#include "nf4/nf4.h"

/* A frozen NF4 weight kept dequantized (be->dequant_cache_bytes) */
typedef struct cpu_cached_weight {
    const qlt_weight *w;
    float *data; /* [rows, cols] */
} cpu_cached_weight;

typedef struct cpu_impl {
    float *dequant;        /* scratch for one dequantized NF4 weight */
    int64_t dequant_cap;   /* elements */
    cpu_cached_weight *cache; /* [n_cache] weights kept dequantized, within be->dequant_cache_bytes */
    int n_cache, cap_cache;
    int64_t cache_bytes;   /* what they hold */
    int profiling;
    qlt_phase current;
    double mark;           /* time of the last phase mark */
    double ms[QLT_PHASE_COUNT];
    size_t live_bytes, peak_bytes;
} cpu_impl;

/* Bytes held, for the peak-memory figure: as the CUDA backend counts, every allocation the backend holds
 * (be->alloc, NF4 weight storage, the dequantization scratch), so both report the same kind of peak. */
static void track(cpu_impl *impl, int64_t bytes) {
    if (bytes < 0) {
        impl->live_bytes -= (size_t)(-bytes);
        return;
    }
    impl->live_bytes += (size_t)bytes;
    if (impl->live_bytes > impl->peak_bytes) impl->peak_bytes = impl->live_bytes;
}

/* What qlt_nf4_alloc_host holds for q: codes, the 16-entry codebook, and the absmax (float32 [nblocks], or
 * uint8 [nblocks] + nested float32 absmax + the 256-entry nested map). */
static int64_t nf4_host_bytes(const qlt_nf4 *q) {
    int64_t bytes = (q->numel + 1) / 2 + (int64_t)sizeof(float) * 16;
    if (q->double_quant) bytes += q->nblocks + (int64_t)sizeof(float) * (q->nested_nblocks + 256);
    else bytes += (int64_t)sizeof(float) * q->nblocks;
    return bytes;
}

/* Every be->alloc allocation carries its size in a 64-byte header. */
#define CPU_ALLOC_HEADER 64

static void *cpu_alloc(qlt_backend *be, size_t bytes) {
    cpu_impl *impl = be->impl;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes + CPU_ALLOC_HEADER) != 0) return NULL;
    *(size_t *)p = bytes;
    track(impl, (int64_t)bytes);
    return (char *)p + CPU_ALLOC_HEADER;
}

static void cpu_free(qlt_backend *be, void *p) {
    if (!p) return;
    cpu_impl *impl = be->impl;
    char *base = (char *)p - CPU_ALLOC_HEADER;
    track(impl, -(int64_t)*(size_t *)base);
    free(base);
}

static size_t cpu_available_bytes(qlt_backend *be) {
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : 0;
}

static size_t cpu_peak_bytes(qlt_backend *be) { return ((cpu_impl *)be->impl)->peak_bytes; }
static int64_t cpu_dequant_cache_held(qlt_backend *be) { return ((cpu_impl *)be->impl)->cache_bytes; }

static double wall_ms(void) { return 1e3 * qlt_now_seconds(); }

static void cpu_phase(qlt_backend *be, qlt_phase p) {
    cpu_impl *impl = be->impl;
    if (!impl->profiling) return;
    double now = wall_ms();
    impl->ms[impl->current] += now - impl->mark;
    impl->mark = now;
    impl->current = p;
}

static void cpu_profile_on(qlt_backend *be, int on) {
    cpu_impl *impl = be->impl;
    memset(impl->ms, 0, sizeof impl->ms);
    impl->profiling = on;
    impl->current = QLT_PHASE_OTHER;
    impl->mark = wall_ms();
}

static void cpu_profile_read(qlt_backend *be, double ms[QLT_PHASE_COUNT]) {
    cpu_impl *impl = be->impl;
    cpu_phase(be, impl->current);
    memcpy(ms, impl->ms, sizeof impl->ms);
}
static void cpu_upload(qlt_backend *be, void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void cpu_download(qlt_backend *be, void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void cpu_sync(qlt_backend *be) {}

static void cpu_destroy(qlt_backend *be) {
    cpu_impl *impl = be->impl;
    free(impl->dequant);
    for (int i = 0; i < impl->n_cache; i++) free(impl->cache[i].data);
    free(impl->cache);
    free(impl);
    free(be);
}

/* w's entry in the dequantized-weight cache, or -1 */
static int cache_find(const cpu_impl *impl, const qlt_weight *w) {
    for (int i = 0; i < impl->n_cache; i++)
        if (impl->cache[i].w == w) return i;
    return -1;
}

/* A new cache entry for NF4 weight w when the budget has room (NULL otherwise: w is dequantized each use). */
static float *cache_add(qlt_backend *be, const qlt_weight *w) {
    cpu_impl *impl = be->impl;
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
    impl->cache[impl->n_cache++] = (cpu_cached_weight){w, data};
    impl->cache_bytes += bytes;
    track(impl, bytes);
    return data;
}

static void cache_drop(qlt_backend *be, const qlt_weight *w) {
    cpu_impl *impl = be->impl;
    int i = cache_find(impl, w);
    if (i < 0) return;
    const int64_t bytes = (int64_t)sizeof(float) * w->rows * w->cols;
    free(impl->cache[i].data);
    impl->cache[i] = impl->cache[--impl->n_cache];
    impl->cache_bytes -= bytes;
    track(impl, -bytes);
}

/* Returns the weight as float32 [rows, cols]: the stored array, NF4 kept dequantized (be->dequant_cache_bytes),
 * or NF4 dequantized into scratch. */
static const float *cpu_weight_f32(qlt_backend *be, const qlt_weight *w) {
    if (w->format == QLT_WFORMAT_F32) return w->data;
    QLT_ASSERT(w->format == QLT_WFORMAT_NF4);
    cpu_impl *impl = be->impl;
    int cached = cache_find(impl, w);
    if (cached >= 0) return impl->cache[cached].data;
    float *dst = be->dequant_cache_bytes > 0 ? cache_add(be, w) : NULL;
    if (!dst) {
        QLT_ASSERT(w->rows * w->cols <= impl->dequant_cap);
        dst = impl->dequant;
    }
    qlt_phase was = impl->current;
    cpu_phase(be, QLT_PHASE_DEQUANT);
    qlt_nf4_dequantize_f32(&w->nf4, dst);
    cpu_phase(be, was);
    return dst;
}

/* Grows the dequantization scratch at load time (never inside a step). */
static int cpu_reserve_dequant(qlt_backend *be, int64_t numel) {
    cpu_impl *impl = be->impl;
    if (numel > impl->dequant_cap) {
        track(impl, -(int64_t)sizeof(float) * impl->dequant_cap);
        impl->dequant = qlt_xrealloc(impl->dequant, sizeof(float) * (size_t)numel);
        impl->dequant_cap = numel;
        track(impl, (int64_t)sizeof(float) * numel);
    }
    return 0;
}

static int cpu_weight_create(qlt_backend *be, qlt_weight *w, const void *host, qlt_dtype dtype, int64_t rows,
                             int64_t cols, int nf4_blocksize, int double_quant) {
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    int64_t numel = rows * cols;
    if (nf4_blocksize <= 0) { /* float32, converted straight into the weight's own memory */
        w->format = QLT_WFORMAT_F32;
        w->data = cpu_alloc(be, sizeof(float) * (size_t)numel);
        if (!w->data) return qlt_fail("out of host memory for a [%lld, %lld] weight", (long long)rows, (long long)cols);
        qlt_convert_to_f32(w->data, host, dtype, (size_t)numel);
        return 0;
    }
    QLT_TRY(qlt_nf4_check_blocksize(nf4_blocksize));
    w->format = QLT_WFORMAT_NF4;
    QLT_TRY(qlt_nf4_alloc_host(&w->nf4, numel, nf4_blocksize, double_quant));
    track(be->impl, nf4_host_bytes(&w->nf4));
    /* float32 first: the stored tensor may sit unaligned in the mapped file */
    float *dense = qlt_xmalloc(sizeof(float) * (size_t)numel);
    qlt_convert_to_f32(dense, host, dtype, (size_t)numel);
    qlt_nf4_quantize_f32(&w->nf4, dense);
    free(dense);
    return cpu_reserve_dequant(be, numel);
}

static int cpu_weight_from_nf4(qlt_backend *be, qlt_weight *w, qlt_nf4 *host, int64_t rows, int64_t cols) {
    memset(w, 0, sizeof *w);
    w->format = QLT_WFORMAT_NF4;
    w->rows = rows;
    w->cols = cols;
    w->nf4 = *host;
    memset(host, 0, sizeof *host);
    track(be->impl, nf4_host_bytes(&w->nf4));
    return cpu_reserve_dequant(be, rows * cols);
}

static void cpu_weight_free(qlt_backend *be, qlt_weight *w) {
    cache_drop(be, w);
    if (w->format == QLT_WFORMAT_NF4) {
        track(be->impl, -nf4_host_bytes(&w->nf4));
        qlt_nf4_free_host(&w->nf4);
    } else {
        cpu_free(be, w->data);
    }
    memset(w, 0, sizeof *w);
}

static void cpu_zero(qlt_backend *be, void *p, size_t n) { memset(p, 0, n); }

static void cpu_embed(qlt_backend *be, void *x, const int32_t *ids, const qlt_weight *emb, int64_t n) {
    QLT_ASSERT(emb->format == QLT_WFORMAT_F32);
    const float *table = emb->data;
    for (int64_t t = 0; t < n; t++) {
        QLT_ASSERT(ids[t] >= 0 && ids[t] < emb->rows);
        memcpy((float *)x + t * emb->cols, table + (int64_t)ids[t] * emb->cols, sizeof(float) * (size_t)emb->cols);
    }
}

static void cpu_rmsnorm_fwd(qlt_backend *be, void *y, float *rstd, const void *x, const float *w, int64_t n,
                            int64_t d, float eps) {
    qlt_cpu_rmsnorm_fwd(y, rstd, x, w, n, d, eps);
}

static void cpu_rmsnorm_bwd(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd,
                            const float *w, int64_t n, int64_t d, float beta) {
    qlt_cpu_rmsnorm_bwd(dx, dy, x, rstd, w, n, d, beta);
}

/* The stack runs weight by weight into its columns of y (the reference needs no side-by-side copy). */
static int cpu_weight_stack_prepare(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols) {
    for (int i = 1; i < k; i++) QLT_ASSERT(w[i]->cols == w[0]->cols);
    return 0;
}

static void cpu_linear_fwd(qlt_backend *be, void *y, const void *x, const qlt_weight *const *w, int k,
                           const float *bias, int64_t n) {
    QLT_ASSERT(k >= 1 && k <= QLT_STACK_MAX && (bias == NULL || k == 1));
    int64_t ld = qlt_stack_rows(w, k), col = 0;
    for (int i = 0; i < k; i++) {
        const float *wf = cpu_weight_f32(be, w[i]);
        qlt_cpu_gemm(0, 1, n, w[i]->rows, w[i]->cols, 1.0f, x, w[i]->cols, wf, w[i]->cols, 0.0f, (float *)y + col, ld);
        col += w[i]->rows;
    }
    if (bias) {
        float *yf = y;
        for (int64_t t = 0; t < n; t++)
            for (int64_t o = 0; o < ld; o++) yf[t * ld + o] += bias[o];
    }
}

static void cpu_linear_bwd_x(qlt_backend *be, void *dx, const void *dy, const qlt_weight *const *w, int k, int64_t n,
                             float beta) {
    int64_t ld = qlt_stack_rows(w, k), col = 0;
    for (int i = 0; i < k; i++) {
        const float *wf = cpu_weight_f32(be, w[i]);
        qlt_cpu_gemm(0, 0, n, w[i]->cols, w[i]->rows, 1.0f, (const float *)dy + col, ld, wf, w[i]->cols,
                     i == 0 ? beta : 1.0f, dx, w[i]->cols);
        col += w[i]->rows;
    }
}

static void cpu_lora_fwd(qlt_backend *be, const qlt_lora_site *sites, int k, float *u, const void *x, int64_t n,
                         int64_t in, int r, float scale) {
    qlt_cpu_lora_fwd(sites, k, u, x, n, in, r, scale);
}

static void cpu_lora_bwd(qlt_backend *be, const qlt_lora_site *sites, int k, float *scratch, const float *u,
                         const void *x, void *dx, float dx_beta, int64_t n, int64_t in, int r, float scale) {
    qlt_cpu_lora_bwd(sites, k, scratch, u, x, dx, dx_beta, n, in, r, scale);
}

/* the reference has nothing to fold: dx = beta dx + dy W (the stack as one product, or weight by weight), then
 * the adapters' products (dx accumulated) */
static void cpu_linear_lora_bwd(qlt_backend *be, void *dx, float dx_beta, const qlt_weight *const *w, int k,
                                int stacked, const qlt_lora_site *sites, float *scratch, const float *u, const void *x,
                                int64_t n, int r, float scale) {
    if (stacked) {
        cpu_linear_bwd_x(be, dx, sites[0].dy, w, k, n, dx_beta);
    } else {
        for (int i = 0; i < k; i++) cpu_linear_bwd_x(be, dx, sites[i].dy, &w[i], 1, n, i == 0 ? dx_beta : 1.0f);
    }
    qlt_cpu_lora_bwd(sites, k, scratch, u, x, dx, 1.0f, n, w[0]->cols, r, scale);
}

static void cpu_rope(qlt_backend *be, void *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                     int head_dim, int inverse) {
    qlt_cpu_rope(x, pos, inv_freq, n, heads, head_dim, inverse);
}

static void cpu_attention_decode(qlt_backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                                 int64_t past, int64_t n, int n_heads, int n_kv_heads, int head_dim, float scale) {
    qlt_cpu_attention_decode(out, q, k_cache, v_cache, past, n, n_heads, n_kv_heads, head_dim, scale);
}

static void cpu_attention_fwd(qlt_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                              const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                              int head_dim, float scale) {
    qlt_cpu_attention_fwd(out, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale);
}

static void cpu_attention_bwd(qlt_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                              const void *out, const float *lse, const void *q, const void *k, const void *v,
                              const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                              int head_dim, float scale) {
    qlt_cpu_attention_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads,
                          head_dim, scale);
}

static size_t cpu_attention_bwd_scratch_bytes(qlt_backend *be, int64_t n, int n_heads, int n_kv_heads, int head_dim) {
    return sizeof(float) * (size_t)n * (size_t)n_heads;
}

static void cpu_swiglu_fwd(qlt_backend *be, void *h, const void *gu, int64_t n, int64_t inter) {
    qlt_cpu_swiglu_fwd(h, gu, n, inter);
}

static void cpu_swiglu_bwd(qlt_backend *be, void *dgu, const void *dh, const void *gu, int64_t n, int64_t inter) {
    qlt_cpu_swiglu_bwd(dgu, dh, gu, n, inter);
}

static void cpu_add_rmsnorm_fwd(qlt_backend *be, void *sum, void *y, float *rstd, const void *a, const void *b,
                                const float *w, int64_t n, int64_t d, float eps) {
    float *s = sum;
    const float *fa = a, *fb = b;
    for (int64_t i = 0; i < n * d; i++) s[i] = fa[i] + fb[i];
    qlt_cpu_rmsnorm_fwd(y, rstd, s, w, n, d, eps);
}

static void cpu_head_norm_rope_fwd(qlt_backend *be, void *y, float *rstd, const void *x, const float *w,
                                   const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                                   float eps) {
    qlt_cpu_rmsnorm_fwd(y, rstd, x, w, n * heads, head_dim, eps);
    qlt_cpu_rope(y, pos, inv_freq, n, heads, head_dim, 0);
}

static void cpu_head_norm_rope_bwd(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd,
                                   const float *w, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                                   int head_dim) {
    memmove(dx, dy, sizeof(float) * (size_t)(n * heads * head_dim));
    qlt_cpu_rope(dx, pos, inv_freq, n, heads, head_dim, 1);
    qlt_cpu_rmsnorm_bwd(dx, dx, x, rstd, w, n * heads, head_dim, 0.0f); /* row by row: in place is safe */
}

static void cpu_copy(qlt_backend *be, void *out, const void *x, int64_t count) {
    memmove(out, x, sizeof(float) * (size_t)count);
}

static void cpu_add(qlt_backend *be, void *out, const void *a, const void *b, int64_t count) {
    float *o = out;
    const float *fa = a, *fb = b;
    for (int64_t i = 0; i < count; i++) o[i] = fa[i] + fb[i];
}

static void cpu_dropout(qlt_backend *be, void *out, const void *x, int64_t count, float p, const uint64_t *seed,
                        uint64_t salt) {
    qlt_cpu_dropout(out, x, count, p, qlt_dropout_seed(*seed, salt));
}

#define CPU_LOSS_CHUNK 4096

static void cpu_lm_head_loss(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch, const void *x,
                             const qlt_weight *w, const int32_t *targets, int64_t n) {
    float grad_scale = scalars->grad_scale;
    const float *wf = cpu_weight_f32(be, w);
    double total = 0;
    for (int64_t t0 = 0; t0 < n; t0 += CPU_LOSS_CHUNK) {
        int64_t tn = n - t0 < CPU_LOSS_CHUNK ? n - t0 : CPU_LOSS_CHUNK;
        total += qlt_cpu_lm_head_loss(dx ? (float *)dx + t0 * w->cols : NULL, scratch, (const float *)x + t0 * w->cols,
                                      wf, targets + t0, tn, w->cols, w->rows, grad_scale);
    }
    scalars->loss_sum += (float)total;
}

/* double logit rows of a 4096-token chunk plus a double per token (the per-token losses) */
static size_t cpu_loss_scratch_bytes(qlt_backend *be, int64_t n, int64_t v) {
    int64_t rows = n < CPU_LOSS_CHUNK ? n : CPU_LOSS_CHUNK;
    return (size_t)rows * ((size_t)v + 1) * sizeof(double);
}

static void cpu_logits(qlt_backend *be, float *out, const void *x, const qlt_weight *w, int64_t n) {
    cpu_linear_fwd(be, out, x, &w, 1, NULL, n);
}

static void cpu_grad_norm_sq(qlt_backend *be, qlt_optim_scalars *scalars, const float *g, int64_t count) {
    scalars->grad_norm_sq = (float)qlt_cpu_sumsq(g, count);
}

static void cpu_adamw(qlt_backend *be, float *p, const float *g, float *m, float *v, int64_t count,
                      const qlt_optim_scalars *s) {
    float clip = qlt_clip_scale(s->grad_norm_sq, s->max_grad_norm);
    qlt_cpu_adamw(p, g, m, v, count, s->lr, s->beta1, s->beta2, s->eps, s->weight_decay, s->bias_correction1,
                  s->bias_correction2, clip);
}

qlt_backend *qlt_backend_cpu_create(int threads) {
    if (threads > 0) omp_set_num_threads(threads);
    qlt_backend *be = qlt_xcalloc(1, sizeof *be);
    be->name = "cpu";
    be->act_dtype = QLT_DTYPE_F32;
    be->backward_a = QLT_BACKWARD_A_FP32;
    be->impl = qlt_xcalloc(1, sizeof(cpu_impl));
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_upload;
    be->download = cpu_download;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    be->profile_on = cpu_profile_on;
    be->phase = cpu_phase;
    be->profile_read = cpu_profile_read;
    be->peak_bytes = cpu_peak_bytes;
    be->dequant_cache_held = cpu_dequant_cache_held;
    be->available_bytes = cpu_available_bytes;
    be->weight_create = cpu_weight_create;
    be->weight_from_nf4 = cpu_weight_from_nf4;
    be->weight_free = cpu_weight_free;
    be->zero = cpu_zero;
    be->embed = cpu_embed;
    be->rmsnorm_fwd = cpu_rmsnorm_fwd;
    be->rmsnorm_bwd = cpu_rmsnorm_bwd;
    be->weight_stack_prepare = cpu_weight_stack_prepare;
    be->linear_fwd = cpu_linear_fwd;
    be->linear_bwd_x = cpu_linear_bwd_x;
    be->lora_fwd = cpu_lora_fwd;
    be->lora_bwd = cpu_lora_bwd;
    be->linear_lora_bwd = cpu_linear_lora_bwd;
    be->rope = cpu_rope;
    be->attention_fwd = cpu_attention_fwd;
    be->attention_decode = cpu_attention_decode;
    be->attention_bwd = cpu_attention_bwd;
    be->attention_bwd_scratch_bytes = cpu_attention_bwd_scratch_bytes;
    be->swiglu_fwd = cpu_swiglu_fwd;
    be->swiglu_bwd = cpu_swiglu_bwd;
    be->add_rmsnorm_fwd = cpu_add_rmsnorm_fwd;
    be->head_norm_rope_fwd = cpu_head_norm_rope_fwd;
    be->head_norm_rope_bwd = cpu_head_norm_rope_bwd;
    be->copy = cpu_copy;
    be->add = cpu_add;
    be->dropout = cpu_dropout;
    be->lm_head_loss = cpu_lm_head_loss;
    be->logits = cpu_logits;
    be->loss_scratch_bytes = cpu_loss_scratch_bytes;
    be->grad_norm_sq = cpu_grad_norm_sq;
    be->adamw = cpu_adamw;
    return be;
}
