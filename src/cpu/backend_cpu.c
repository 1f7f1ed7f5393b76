/* backend_cpu.c: the CPU backend: the qlt_backend table and its memory (allocation, accounting, the profile).
 * Activations are float32 host memory. The ops come in two modes picked at creation: the default runs
 * cpu_fast.h (float32, OpenBLAS, vectorized loops), the reference (train.cpu_reference) cpu_ops.h (double
 * sums, the oracle of the CUDA kernels and of the float64 goldens). Frozen weights: weights.c; the products
 * with them: linear.c. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/optim_guard.h"
#include "common/clock.h"
#include "common/error.h"
#include "cpu/backend_cpu.h"
#include "cpu/backend_cpu_internal.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemma_ops.h"

/* Bytes held, for the peak-memory figure: as the CUDA backend counts, every allocation the backend holds
 * (be->alloc, NF4 weight storage, the dequantization scratch and cache), so both report the same kind of peak. */
void qlt_cpu_track(qlt_cpu_impl *impl, int64_t bytes) {
    size_t *live = impl->plan.on ? &impl->plan.live : &impl->live_bytes;
    size_t *peak = impl->plan.on ? &impl->plan.peak : &impl->peak_bytes;
    if (bytes < 0) {
        *live -= (size_t)(-bytes);
        return;
    }
    *live += (size_t)bytes;
    if (*live > *peak) *peak = *live;
}

/* Every be->alloc allocation carries its size in a 64-byte header. While planning only the header is allocated:
 * the address is distinct and free() takes it back, and nothing is ever read or written there. */
#define CPU_ALLOC_HEADER 64

static void *cpu_alloc(qlt_backend *be, size_t bytes) {
    qlt_cpu_impl *impl = be->impl;
    void *p = NULL;
    if (posix_memalign(&p, 64, (impl->plan.on ? 0 : bytes) + CPU_ALLOC_HEADER) != 0) return NULL;
    *(size_t *)p = bytes;
    qlt_cpu_track(impl, (int64_t)bytes);
    return (char *)p + CPU_ALLOC_HEADER;
}

static void cpu_free(qlt_backend *be, void *p) {
    if (!p) return;
    qlt_cpu_impl *impl = be->impl;
    char *base = (char *)p - CPU_ALLOC_HEADER;
    qlt_cpu_track(impl, -(int64_t)*(size_t *)base);
    free(base);
}

/* The RAM a run can still take: MemAvailable (free memory plus the page cache and buffers the kernel can give
 * back), else the free pages alone. */
static size_t cpu_available_bytes(qlt_backend *be) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib = 0;
        int found = 0;
        while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
        fclose(f);
        if (found) return (size_t)kib * 1024;
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : 0;
}

static size_t cpu_peak_bytes(qlt_backend *be) { return ((qlt_cpu_impl *)be->impl)->peak_bytes; }
static size_t cpu_live_bytes(qlt_backend *be) { return ((qlt_cpu_impl *)be->impl)->live_bytes; }

static double wall_ms(void) { return 1e3 * qlt_now_seconds(); }

void qlt_cpu_phase(qlt_backend *be, qlt_phase p) {
    qlt_cpu_impl *impl = be->impl;
    if (!impl->profiling) return;
    double now = wall_ms();
    impl->ms[impl->current] += now - impl->mark;
    impl->mark = now;
    impl->current = p;
}

static void cpu_profile_on(qlt_backend *be, int on) {
    qlt_cpu_impl *impl = be->impl;
    memset(impl->ms, 0, sizeof impl->ms);
    impl->profiling = on;
    impl->n_shapes = impl->shapes_dropped = 0;
    impl->current = QLT_PHASE_OTHER;
    impl->mark = wall_ms();
}

static void cpu_profile_read(qlt_backend *be, double ms[QLT_PHASE_COUNT]) {
    qlt_cpu_impl *impl = be->impl;
    qlt_cpu_phase(be, impl->current);
    memcpy(ms, impl->ms, sizeof impl->ms);
}
static int planning(qlt_backend *be) { return ((qlt_cpu_impl *)be->impl)->plan.on; }

static void cpu_upload(qlt_backend *be, void *dst, const void *src, size_t n) {
    if (!planning(be)) memcpy(dst, src, n);
}
static void cpu_download(qlt_backend *be, void *dst, const void *src, size_t n) {
    if (planning(be)) memset(dst, 0, n);
    else memcpy(dst, src, n);
}
static void cpu_sync(qlt_backend *be) {}

/* ---- memory planning (backend.h) ---- */

static void cpu_plan_begin(qlt_backend *be) {
    qlt_cpu_impl *impl = be->impl;
    QLT_ASSERT(!impl->plan.on);
    impl->plan.on = 1;
    impl->plan.live = impl->plan.peak = 0;
    impl->plan.dequant_cap = impl->dequant_cap;
    impl->plan.lora_work_floats = impl->lora_work_floats;
}

static size_t cpu_plan_end(qlt_backend *be) {
    qlt_cpu_impl *impl = be->impl;
    QLT_ASSERT(impl->plan.on);
    impl->plan.on = 0;
    return impl->plan.peak + sizeof(float) * (size_t)(impl->plan.dequant_cap - impl->dequant_cap) +
           sizeof(float) * (size_t)(impl->plan.lora_work_floats - impl->lora_work_floats);
}

static void cpu_destroy(qlt_backend *be) {
    qlt_cpu_weights_release(be);
    free(((qlt_cpu_impl *)be->impl)->lora_work);
    free(be->impl);
    free(be);
}

static int reference_mode(qlt_backend *be) { return ((qlt_cpu_impl *)be->impl)->reference; }

/* ---- the ops that read no frozen weight: each mode's function ---- */

static void cpu_zero(qlt_backend *be, void *p, size_t n) {
    if (!planning(be)) memset(p, 0, n);
}

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
    if (reference_mode(be)) qlt_cpu_rmsnorm_fwd(y, rstd, x, w, n, d, eps);
    else qlt_cpu_rmsnorm_fwd_fast(y, rstd, x, w, n, d, eps);
}

static void cpu_rmsnorm_bwd(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd,
                            const float *w, int64_t n, int64_t d, float beta) {
    if (reference_mode(be)) qlt_cpu_rmsnorm_bwd(dx, dy, x, rstd, w, n, d, beta);
    else qlt_cpu_rmsnorm_bwd_fast(dx, dy, x, rstd, w, n, d, beta);
}

static void cpu_rope(qlt_backend *be, void *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                     int head_dim, int inverse) {
    if (reference_mode(be)) qlt_cpu_rope(x, pos, inv_freq, n, heads, head_dim, inverse);
    else qlt_cpu_rope_fast(x, pos, inv_freq, n, heads, head_dim, inverse);
}

static void cpu_rope_scaled(qlt_backend *be, void *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                            int head_dim, int rotary_dim, float attn_factor, int transpose) {
    if (reference_mode(be)) qlt_cpu_rope_scaled(x, pos, inv_freq, n, heads, head_dim, rotary_dim, attn_factor, transpose);
    else qlt_cpu_rope_scaled_fast(x, pos, inv_freq, n, heads, head_dim, rotary_dim, attn_factor, transpose);
}

static void cpu_attention_decode(qlt_backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                                 const int32_t *pos, int64_t max_keys, int64_t n, int n_heads, int n_kv_heads,
                                 int head_dim, float scale, int window) {
    QLT_ASSERT(n >= 1 && pos[n - 1] == pos[0] + n - 1 && pos[n - 1] < max_keys);
    qlt_cpu_attention_decode(out, q, k_cache, v_cache, pos[0], n, n_heads, n_kv_heads, head_dim, scale, window);
}

static void cpu_kv_store(qlt_backend *be, void *k_cache, void *v_cache, const void *k_new, const void *v_new,
                         const int32_t *pos, int64_t n, int64_t width) {
    const size_t row = sizeof(float) * (size_t)width;
    for (int64_t i = 0; i < n; i++) {
        memcpy((char *)k_cache + row * (size_t)pos[i], (const char *)k_new + row * (size_t)i, row);
        memcpy((char *)v_cache + row * (size_t)pos[i], (const char *)v_new + row * (size_t)i, row);
    }
}

static void cpu_attention_fwd(qlt_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                              const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                              int head_dim, float scale) {
    if (reference_mode(be))
        qlt_cpu_attention_fwd(out, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale);
    else
        qlt_cpu_attention_fwd_fast(out, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale);
}

static void cpu_attention_bwd(qlt_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                              const void *out, const float *lse, const void *q, const void *k, const void *v,
                              const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                              int head_dim, float scale) {
    if (reference_mode(be))
        qlt_cpu_attention_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads,
                              head_dim, scale);
    else
        qlt_cpu_attention_bwd_fast(dq, dk, dv, scratch, dout, out, lse, q, k, v, seg_start, batch, seq, n_heads,
                                   n_kv_heads, head_dim, scale);
}

static size_t cpu_attention_bwd_scratch_bytes(qlt_backend *be, int64_t n, int n_heads, int n_kv_heads, int head_dim) {
    return sizeof(float) * (size_t)n * (size_t)n_heads;
}

static void cpu_swiglu_fwd(qlt_backend *be, void *h, const void *gu, int64_t n, int64_t inter) {
    if (reference_mode(be)) qlt_cpu_swiglu_fwd(h, gu, n, inter);
    else qlt_cpu_swiglu_fwd_fast(h, gu, n, inter);
}

static void cpu_swiglu_bwd(qlt_backend *be, void *dgu, const void *dh, const void *gu, int64_t n, int64_t inter) {
    if (reference_mode(be)) qlt_cpu_swiglu_bwd(dgu, dh, gu, n, inter);
    else qlt_cpu_swiglu_bwd_fast(dgu, dh, gu, n, inter);
}

static void cpu_add_rmsnorm_fwd(qlt_backend *be, void *sum, void *y, float *rstd, const void *a, const void *b,
                                const float *w, int64_t n, int64_t d, float eps) {
    qlt_cpu_add(sum, a, b, n * d);
    cpu_rmsnorm_fwd(be, y, rstd, sum, w, n, d, eps);
}

static void cpu_head_norm_rope_fwd(qlt_backend *be, void *y, float *rstd, const void *x, const float *w,
                                   const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                                   float eps) {
    cpu_rmsnorm_fwd(be, y, rstd, x, w, n * heads, head_dim, eps);
    cpu_rope(be, y, pos, inv_freq, n, heads, head_dim, 0);
}

static void cpu_head_norm_rope_bwd(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd,
                                   const float *w, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                                   int head_dim) {
    memmove(dx, dy, sizeof(float) * (size_t)(n * heads * head_dim));
    cpu_rope(be, dx, pos, inv_freq, n, heads, head_dim, 1);
    cpu_rmsnorm_bwd(be, dx, dx, x, rstd, w, n * heads, head_dim, 0.0f); /* row by row: in place is safe */
}

static void cpu_copy(qlt_backend *be, void *out, const void *x, int64_t count) {
    memmove(out, x, sizeof(float) * (size_t)count);
}

static void cpu_add(qlt_backend *be, void *out, const void *a, const void *b, int64_t count) {
    qlt_cpu_add(out, a, b, count);
}

static void cpu_dropout(qlt_backend *be, void *out, const void *x, int64_t count, float p, const uint64_t *seed,
                        uint64_t salt) {
    qlt_cpu_dropout(out, x, count, p, qlt_dropout_seed(*seed, salt));
}

/* After a recorded fault (the injection hook) the optimizer ops change nothing, as on CUDA: the state stays the
 * last finished step's. */
static void cpu_grad_norm_sq(qlt_backend *be, qlt_optim_scalars *scalars, const float *g, int64_t count) {
    if (((qlt_cpu_impl *)be->impl)->fault) return;
    scalars->grad_norm_sq = (float)qlt_cpu_sumsq(g, count);
    qlt_optim_guard(scalars);
}

static void cpu_adamw(qlt_backend *be, float *p, const float *g, float *m, float *v, int64_t count,
                      const qlt_optim_scalars *s) {
    if (((qlt_cpu_impl *)be->impl)->fault || s->skip) return;
    float clip = qlt_clip_scale(s->grad_norm_sq, s->max_grad_norm);
    qlt_cpu_adamw(p, g, m, v, count, s->lr, s->beta1, s->beta2, s->eps, s->weight_decay, s->bias_correction1,
                  s->bias_correction2, clip);
}

static int cpu_fault_state(qlt_backend *be, char *msg, size_t cap) {
    int fault = ((qlt_cpu_impl *)be->impl)->fault;
    if (cap) snprintf(msg, cap, "%s", fault == QLT_FAULT_STICKY      ? "injected sticky fault (QLT_TEST_DEVICE_FAULT)"
                                      : fault == QLT_FAULT_RECOVERABLE ? "injected recoverable fault (QLT_TEST_DEVICE_FAULT)"
                                                                       : "");
    return fault;
}

static void cpu_fault_inject(qlt_backend *be, int sticky) {
    qlt_cpu_impl *impl = be->impl;
    if (!impl->fault) impl->fault = sticky ? QLT_FAULT_STICKY : QLT_FAULT_RECOVERABLE;
}

/* OpenBLAS runs on the same OpenMP threads as the ops (its OpenMP build); a pthreads build of it gets the same
 * count, which only keeps the two from running at once where the ops call it outside their parallel loops. */
static void set_threads(int threads) {
    if (threads > 0) omp_set_num_threads(threads);
    openblas_set_num_threads(omp_get_max_threads());
    static int warned;
    if (openblas_get_parallel() == 1 && !warned) {
        warned = 1;
        fprintf(stderr, "qlora-train: OpenBLAS is its pthreads build: attention then runs its products on threads "
                        "of its own beside ours (install libopenblas-openmp-dev for the OpenMP one)\n");
    }
}

qlt_backend *qlt_backend_cpu_create(int threads, int reference) {
    set_threads(threads);
    qlt_backend *be = qlt_xcalloc(1, sizeof *be);
    be->name = "cpu";
    snprintf(be->device_name, sizeof be->device_name, "this machine's RAM (CPU backend)");
    be->act_dtype = QLT_DTYPE_F32;
    be->backward_a = QLT_BACKWARD_A_FP32;
    qlt_cpu_impl *impl = qlt_xcalloc(1, sizeof(qlt_cpu_impl));
    impl->reference = reference ? 1 : 0;
    impl->gemm = reference ? qlt_cpu_gemm : qlt_cpu_sgemm;
    be->impl = impl;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_upload;
    be->download = cpu_download;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    be->profile_on = cpu_profile_on;
    be->phase = qlt_cpu_phase;
    be->profile_read = cpu_profile_read;
    be->peak_bytes = cpu_peak_bytes;
    be->live_bytes = cpu_live_bytes;
    be->plan_begin = cpu_plan_begin;
    be->plan_end = cpu_plan_end;
    be->dequant_cache_held = qlt_cpu_dequant_cache_held;
    be->available_bytes = cpu_available_bytes;
    be->gemm_peak_tflops = qlt_cpu_gemm_peak_tflops;
    be->weight_create = qlt_cpu_weight_create;
    be->weight_from_nf4 = qlt_cpu_weight_from_nf4;
    be->weight_free = qlt_cpu_weight_free;
    be->zero = cpu_zero;
    be->embed = cpu_embed;
    be->rmsnorm_fwd = cpu_rmsnorm_fwd;
    be->rmsnorm_bwd = cpu_rmsnorm_bwd;
    be->weight_stack_prepare = qlt_cpu_weight_stack_prepare;
    be->linear_fwd = qlt_cpu_linear_fwd;
    be->linear_bwd_x = qlt_cpu_linear_bwd_x;
    be->lora_fwd = qlt_cpu_lora_fwd_op;
    be->lora_bwd = qlt_cpu_lora_bwd_op;
    be->lora_group_prepare = qlt_cpu_lora_group_prepare;
    be->linear_lora_bwd = qlt_cpu_linear_lora_bwd;
    be->rope = cpu_rope;
    be->rope_scaled = cpu_rope_scaled;
    be->attention_fwd = cpu_attention_fwd;
    be->attention_decode = cpu_attention_decode;
    be->kv_store = cpu_kv_store;
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
    be->lm_head_loss = qlt_cpu_lm_head_loss_op;
    be->logits = qlt_cpu_logits;
    be->loss_scratch_bytes = qlt_cpu_loss_scratch_bytes;
    be->grad_norm_sq = cpu_grad_norm_sq;
    be->adamw = cpu_adamw;
    be->fault_state = cpu_fault_state;
    be->fault_inject = cpu_fault_inject;
    qlt_cpu_install_gemma_ops(be);
    return be;
}
