/* linear.c: the CPU backend's products with frozen weights: the linear stack forward and its dx backward,
 * the LoRA group side path, the linear group with adapters (backward), logits and the fused lm_head +
 * cross-entropy. Each reads its weights as float32 (weights.c) and multiplies with the mode's product:
 * OpenBLAS by default, the double-accumulating reference with train.cpu_reference. */
#include "common/error.h"
#include "cpu/backend_cpu_internal.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemma_ops.h"

static qlt_cpu_gemm_fn gemm_of(qlt_backend *be) { return ((qlt_cpu_impl *)be->impl)->gemm; }

/* y [n, sum rows_i] = x [n, cols] . [W_0; ...]^T, weight by weight into y's columns (+ bias, k == 1) */
void qlt_cpu_linear_fwd(qlt_backend *be, void *y, const void *x, const qlt_weight *const *w, int k, const float *bias,
                        int64_t n) {
    QLT_ASSERT(k >= 1 && k <= QLT_STACK_MAX && (bias == NULL || k == 1));
    qlt_cpu_gemm_fn gemm = gemm_of(be);
    int64_t ld = qlt_stack_rows(w, k), col = 0;
    for (int i = 0; i < k; i++) {
        const float *wf = qlt_cpu_weight_f32(be, w[i]);
        qlt_cpu_record_gemm(be->impl, 1, n, w[i]->rows, w[i]->cols);
        gemm(0, 1, n, w[i]->rows, w[i]->cols, 1.0f, x, w[i]->cols, wf, w[i]->cols, 0.0f, (float *)y + col, ld);
        col += w[i]->rows;
    }
    if (bias) {
        float *yf = y;
#pragma omp parallel for schedule(static) if (n * ld > 65536)
        for (int64_t t = 0; t < n; t++)
            for (int64_t o = 0; o < ld; o++) yf[t * ld + o] += bias[o];
    }
}

/* dx [n, cols] = beta dx + dy [n, sum rows_i] . [W_0; ...] */
void qlt_cpu_linear_bwd_x(qlt_backend *be, void *dx, const void *dy, const qlt_weight *const *w, int k, int64_t n,
                          float beta) {
    qlt_cpu_gemm_fn gemm = gemm_of(be);
    int64_t ld = qlt_stack_rows(w, k), col = 0;
    for (int i = 0; i < k; i++) {
        const float *wf = qlt_cpu_weight_f32(be, w[i]);
        qlt_cpu_record_gemm(be->impl, 0, n, w[i]->cols, w[i]->rows);
        gemm(0, 0, n, w[i]->cols, w[i]->rows, 1.0f, (const float *)dy + col, ld, wf, w[i]->cols, i == 0 ? beta : 1.0f,
             dx, w[i]->cols);
        col += w[i]->rows;
    }
}

void qlt_cpu_lora_fwd_op(qlt_backend *be, const qlt_lora_site *sites, int k, float *u, const void *x, int64_t n,
                         int64_t in, int r, float scale) {
    qlt_cpu_impl *impl = be->impl;
    if (impl->reference) qlt_cpu_lora_fwd(sites, k, u, x, n, in, r, scale);
    else qlt_cpu_lora_fwd_fast(sites, k, u, x, n, in, r, scale, impl->lora_work, impl->lora_work_floats);
}

void qlt_cpu_lora_bwd_op(qlt_backend *be, const qlt_lora_site *sites, int k, float *scratch, const float *u,
                         const void *x, void *dx, float dx_beta, int64_t n, int64_t in, int r, float scale) {
    qlt_cpu_impl *impl = be->impl;
    if (impl->reference) qlt_cpu_lora_bwd(sites, k, scratch, u, x, dx, dx_beta, n, in, r, scale);
    else qlt_cpu_lora_bwd_fast(sites, k, scratch, u, x, dx, dx_beta, n, in, r, scale, impl->lora_work,
                               impl->lora_work_floats);
}

/* The default mode's LoRA workspace: room for a group's A side by side and their gradient (lora.c). */
int qlt_cpu_lora_group_prepare(qlt_backend *be, int k, int64_t in, const int64_t *outs, int r) {
    qlt_cpu_impl *impl = be->impl;
    const int64_t floats = 2 * (int64_t)k * r * in;
    if (impl->plan.on) { /* note the size only (backend.h plan_begin) */
        if (floats > impl->plan.lora_work_floats) impl->plan.lora_work_floats = floats;
        return 0;
    }
    if (floats > impl->lora_work_floats) {
        qlt_cpu_track(impl, -(int64_t)sizeof(float) * impl->lora_work_floats);
        impl->lora_work = qlt_xrealloc(impl->lora_work, sizeof(float) * (size_t)floats);
        impl->lora_work_floats = floats;
        qlt_cpu_track(impl, (int64_t)sizeof(float) * floats);
    }
    return 0;
}

/* Nothing is folded: dx = beta dx + dy W (the stack as one product, or weight by weight), then the adapters'
 * products (dx accumulated); the phases marked as the separate ops would mark them. */
void qlt_cpu_linear_lora_bwd(qlt_backend *be, void *dx, float dx_beta, const qlt_weight *const *w, int k, int stacked,
                             const qlt_lora_site *sites, float *scratch, const float *u, const void *x, int64_t n,
                             int r, float scale) {
    if (stacked) {
        qlt_cpu_linear_bwd_x(be, dx, sites[0].dy, w, k, n, dx_beta);
    } else {
        for (int i = 0; i < k; i++) qlt_cpu_linear_bwd_x(be, dx, sites[i].dy, &w[i], 1, n, i == 0 ? dx_beta : 1.0f);
    }
    qlt_cpu_phase(be, QLT_PHASE_LORA);
    qlt_cpu_lora_bwd_op(be, sites, k, scratch, u, x, dx, 1.0f, n, w[0]->cols, r, scale);
}

/* reference: chunks of this many tokens, double logit rows */
#define CPU_LOSS_CHUNK 4096

void qlt_cpu_lm_head_loss_op(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch, const void *x,
                             const qlt_weight *w, const int32_t *targets, int64_t n) {
    qlt_cpu_lm_head_loss_softcap_op(be, scalars, dx, scratch, x, w, targets, n, 0);
}

/* softcap > 0: Gemma's final_logit_softcapping (gemma_ops.h) */
void qlt_cpu_lm_head_loss_softcap_op(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch,
                                     const void *x, const qlt_weight *w, const int32_t *targets, int64_t n,
                                     float softcap) {
    const float grad_scale = scalars->grad_scale;
    const float *wf = qlt_cpu_weight_f32(be, w);
    double total = 0;
    if (!((qlt_cpu_impl *)be->impl)->reference) {
        total = qlt_cpu_lm_head_loss_softcap_fast(dx, scratch, x, wf, targets, n, w->cols, w->rows, grad_scale,
                                                  softcap);
    } else {
        for (int64_t t0 = 0; t0 < n; t0 += CPU_LOSS_CHUNK) {
            int64_t tn = n - t0 < CPU_LOSS_CHUNK ? n - t0 : CPU_LOSS_CHUNK;
            total += qlt_cpu_lm_head_loss_softcap(dx ? (float *)dx + t0 * w->cols : NULL, scratch,
                                                  (const float *)x + t0 * w->cols, wf, targets + t0, tn, w->cols,
                                                  w->rows, grad_scale, softcap);
        }
    }
    scalars->loss_sum += (float)total;
}

/* reference: double logit rows of a 4096-token chunk plus a double per token (the per-token losses) */
size_t qlt_cpu_loss_scratch_bytes(qlt_backend *be, int64_t n, int64_t v) {
    if (!((qlt_cpu_impl *)be->impl)->reference) return qlt_cpu_lm_head_loss_fast_scratch(n, v);
    int64_t rows = n < CPU_LOSS_CHUNK ? n : CPU_LOSS_CHUNK;
    return (size_t)rows * ((size_t)v + 1) * sizeof(double);
}

void qlt_cpu_logits(qlt_backend *be, float *out, const void *x, const qlt_weight *w, int64_t n) {
    qlt_cpu_linear_fwd(be, out, x, &w, 1, NULL, n);
}
