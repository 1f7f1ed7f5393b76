/* memory_plan.c: see memory_plan.h. */
#include "train/memory_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/env.h"
#include "common/error.h"
#include "model/lora.h"
#include "model/model.h"
#include "nf4/nf4.h"
#include "train/trainer.h"

#define GIB 1073741824.0

static double weight_bytes(const qlt_weight *w) {
    double numel = (double)w->rows * (double)w->cols;
    switch (w->format) {
    case QLT_WFORMAT_NF4: return (double)qlt_nf4_bytes(w->nf4.numel, w->nf4.blocksize, w->nf4.double_quant);
    case QLT_WFORMAT_F32: return 4 * numel;
    default: return 2 * numel;
    }
}

/* The frozen weights as stored, norms and biases (float32) included; *nf4_elems: elements stored as NF4 (what the
 * dequantization cache may hold as bf16). */
static double model_bytes(const qlt_model *m, double *nf4_elems) {
    const qlt_model_config *c = &m->cfg;
    double bytes = weight_bytes(&m->embed) + (m->lm_head_shared ? 0 : weight_bytes(&m->lm_head)) + 4.0 * c->hidden;
    *nf4_elems = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const qlt_layer *layer = &m->layers[l];
        for (int p = 0; p < QLT_PROJ_COUNT; p++) {
            bytes += weight_bytes(&layer->proj[p]);
            if (layer->proj[p].format == QLT_WFORMAT_NF4) *nf4_elems += (double)layer->proj[p].nf4.numel;
        }
        bytes += 2 * 4.0 * c->hidden;
        for (int b = 0; b < 3; b++)
            if (layer->bias[b]) bytes += 4.0 * (double)layer->proj[b].rows;
        if (layer->q_norm) bytes += 2 * 4.0 * c->head_dim;
    }
    return bytes;
}

/* The adapter a run of cfg trains or evaluates: lora.init_from's own shape when set. 0: none (evaluating the base
 * model), 1: *r etc. filled, -1 with qlt_fail. */
static int adapter_shape(const qlt_config *cfg, int train, int *r, float *alpha, unsigned *targets, int *rslora) {
    *r = cfg->lora.r, *alpha = cfg->lora.alpha, *targets = cfg->lora.targets, *rslora = cfg->lora.rslora;
    const char *init = cfg->lora.init_from;
    if (init && init[0]) {
        float dropout;
        QLT_TRY(qlt_lora_read_peft_config(init, r, alpha, targets, rslora, &dropout));
        return 1;
    }
    return train ? 1 : 0;
}

/* The parts of the run the plan builds, all on the planning backend. */
typedef struct plan_run {
    qlt_trainer t; /* only the fields qlt_trainer_measure_plan reads */
    int model_made, lora_made;
} plan_run;

static void plan_run_free(plan_run *pr) {
    qlt_trainer *t = &pr->t;
    qlt_backend *be = t->be;
    qlt_graph_free(&t->graph);
    qlt_graph_free(&t->recompute);
    for (int i = 0; i < t->n_bbs; i++) qlt_batch_buffers_free(&t->bbs[i], be);
    free(t->bbs);
    if (t->scalars) be->free(be, t->scalars);
    if (t->dropout_seeds) be->free(be, t->dropout_seeds);
    if (t->loss_scratch) be->free(be, t->loss_scratch);
    if (pr->lora_made) qlt_lora_free(&t->lora);
    if (pr->model_made) qlt_model_free(&t->model);
}

/* Builds the run's allocations (between plan_begin and plan_end) and measures the activation arena. */
static int plan_build(plan_run *pr, qlt_memory_plan *p, const qlt_config *cfg, qlt_backend *be, int train,
                      int ckpt_mode, double *nf4_elems) {
    qlt_trainer *t = &pr->t;
    t->be = be;
    t->cfg = cfg;
    t->micro_batch = p->micro_batch;
    t->seq = p->seq;
    t->grad_accum = train ? cfg->train.grad_accum : 1;
    qlt_model_load_opts opts = {.nf4 = cfg->model.quant == QLT_QUANT_NF4,
                                .nf4_blocksize = cfg->model.nf4_blocksize,
                                .double_quant = cfg->model.double_quant};
    QLT_TRY(qlt_model_init_shapes(&t->model, be, cfg->model.path, &opts));
    pr->model_made = 1;
    p->weights = model_bytes(&t->model, nf4_elems);
    int r, rslora;
    float alpha;
    unsigned targets;
    int with_lora = adapter_shape(cfg, train, &r, &alpha, &targets, &rslora);
    if (with_lora < 0) return -1;
    if (with_lora) {
        QLT_TRY(qlt_lora_create(&t->lora, &t->model, r, alpha, targets, rslora, cfg->lora.dropout));
        pr->lora_made = t->has_lora = 1;
        p->lora = 16.0 * (double)t->lora.n_params;
    }
    /* as qlt_trainer_init: a micro-batch's buffers each when the step is a CUDA graph */
    t->n_bbs = train && cfg->train.cuda_graph && be->capture_begin ? t->grad_accum : 1;
    t->bbs = qlt_xcalloc((size_t)t->n_bbs, sizeof *t->bbs);
    for (int i = 0; i < t->n_bbs; i++)
        QLT_TRY(qlt_batch_buffers_init(&t->bbs[i], be, t->micro_batch, t->seq, t->model.cfg.sliding_window));
    t->scalars = be->alloc(be, sizeof *t->scalars);
    t->dropout_seeds = be->alloc(be, sizeof(uint64_t) * (size_t)t->grad_accum);
    t->loss_scratch = be->alloc(be, qlt_loss_scratch_bytes(&t->model, (int64_t)t->micro_batch * t->seq));
    /* the arena holds the training step's plan and evaluation's (plan_graph in trainer.c) */
    int first = train ? QLT_PLAN_TRAIN : QLT_PLAN_EVAL;
    int ckpt = ckpt_mode == QLT_GRAD_CHECKPOINT_LAYER;
    size_t act = qlt_trainer_measure_plan(t, ckpt, first);
    if (train) {
        size_t eval = qlt_trainer_measure_plan(t, ckpt, QLT_PLAN_EVAL);
        if (eval > act) act = eval;
    }
    p->checkpointing = ckpt;
    p->activations = (double)act;
    return 0;
}

static int plan_once(qlt_memory_plan *p, const qlt_config *cfg, qlt_backend *be, int train, int ckpt_mode) {
    plan_run pr;
    memset(&pr, 0, sizeof pr);
    double nf4_elems = 0;
    size_t in_use = be->live_bytes ? be->live_bytes(be) : 0;
    be->plan_begin(be);
    int rc = plan_build(&pr, p, cfg, be, train, ckpt_mode, &nf4_elems);
    plan_run_free(&pr);
    double counted = (double)be->plan_end(be);
    if (rc != 0) return -1;
    double cache_budget = (double)cfg->train.dequant_cache_gib * GIB;
    p->dequant_cache = fmin(cache_budget, (double)qlt_dtype_size(be->act_dtype) * nf4_elems);
    p->libraries = strcmp(be->name, "cuda") == 0 ? (double)QLT_PLAN_LIBRARY_BYTES : 0;
    p->in_use = (double)in_use;
    p->buffers = fmax(0.0, counted - p->weights - p->lora) + p->in_use;
    p->total = p->weights + p->lora + p->activations + p->buffers + p->dequant_cache + p->libraries;
    p->available = be->available_bytes ? (double)be->available_bytes(be) : 0;
    p->context = be->device_used_bytes ? (double)be->device_used_bytes(be) - p->in_use : 0;
    const char *test_free = qlt_env(QLT_ENV_TEST_FREE_BYTES); /* the test hook (docs/CONFIG.md) */
    if (test_free) p->available = strtod(test_free, NULL);
    return 0;
}

int qlt_memory_plan_fits(const qlt_memory_plan *p) { return p->total - p->in_use <= p->available; }

int qlt_memory_plan_make(qlt_memory_plan *p, const qlt_config *cfg, qlt_backend *be, int train, int micro_batch,
                         int seq, int ckpt_mode) {
    memset(p, 0, sizeof *p);
    p->micro_batch = micro_batch;
    p->seq = seq;
    if (ckpt_mode != QLT_GRAD_CHECKPOINT_AUTO) return plan_once(p, cfg, be, train, ckpt_mode);
    QLT_TRY(plan_once(p, cfg, be, train, QLT_GRAD_CHECKPOINT_NONE));
    if (qlt_memory_plan_fits(p) || !train) return 0;
    qlt_memory_plan with;
    memset(&with, 0, sizeof with);
    with.micro_batch = micro_batch;
    with.seq = seq;
    QLT_TRY(plan_once(&with, cfg, be, train, QLT_GRAD_CHECKPOINT_LAYER));
    *p = with;
    return 0;
}

/* "12.34 GiB", or "56.7 MiB" below a GiB */
static const char *size_text(double bytes, char buf[32]) {
    if (bytes >= GIB) snprintf(buf, 32, "%.2f GiB", bytes / GIB);
    else snprintf(buf, 32, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

void qlt_memory_plan_describe(const qlt_memory_plan *p, char *buf, size_t size) {
    char a[32], b[32], c[32], d[32], e[32], f[32];
    int n = snprintf(buf, size, "%s of %s free (weights %s, LoRA + AdamW %s, activations %s (%s), buffers and workspaces %s",
                     size_text(p->total - p->in_use, a), size_text(p->available, b), size_text(p->weights, c),
                     size_text(p->lora, d), size_text(p->activations, e),
                     p->checkpointing ? "layer checkpointing" : "no checkpointing", size_text(p->buffers - p->in_use, f));
    if (n < 0 || (size_t)n >= size) return;
    if (p->dequant_cache > 0)
        n += snprintf(buf + n, size - (size_t)n, ", dequantized weights %s", size_text(p->dequant_cache, a));
    if ((size_t)n >= size) return;
    if (p->libraries > 0) n += snprintf(buf + n, size - (size_t)n, ", CUDA libraries %s", size_text(p->libraries, a));
    if ((size_t)n < size) snprintf(buf + n, size - (size_t)n, ")");
}

/* Appends "--set k=v ... (X GiB)" for a variant of the run that fits; returns 1 when it fits. */
static int try_variant(const qlt_config *cfg, qlt_backend *be, int train, int micro_batch, int grad_accum, int seq,
                       int ckpt_mode, char *out, size_t size, int *shown) {
    qlt_memory_plan v;
    if (qlt_memory_plan_make(&v, cfg, be, train, micro_batch, seq, ckpt_mode) != 0 || !qlt_memory_plan_fits(&v))
        return 0;
    size_t used = strlen(out);
    char sets[256] = "";
    if (ckpt_mode != (int)cfg->train.grad_checkpoint) strcat(sets, " train.grad_checkpoint=layer");
    if (micro_batch != cfg->train.micro_batch) {
        snprintf(sets + strlen(sets), sizeof sets - strlen(sets), " train.micro_batch=%d", micro_batch);
        if (train)
            snprintf(sets + strlen(sets), sizeof sets - strlen(sets), " train.grad_accum=%d", grad_accum);
    }
    if (seq != cfg->data.seq_len) snprintf(sets + strlen(sets), sizeof sets - strlen(sets), " data.seq_len=%d", seq);
    char need[32];
    snprintf(out + used, size - used, "%s--set%s (%s)", *shown ? "; or " : "", sets, size_text(v.total - v.in_use, need));
    (*shown)++;
    return 1;
}

int qlt_memory_plan_check(qlt_memory_plan *p, const qlt_config *cfg, qlt_backend *be, int train) {
    memset(p, 0, sizeof *p);
    if (!be->plan_begin || !be->plan_end) return 0;
    QLT_TRY(qlt_memory_plan_make(p, cfg, be, train, cfg->train.micro_batch, cfg->data.seq_len,
                                 (int)cfg->train.grad_checkpoint));
    if (qlt_memory_plan_fits(p)) return 0;
    /* what would fit: checkpointing, then smaller micro-batches (the same global batch through more
     * accumulation), then shorter rows; at most three suggestions */
    char fits[1024] = "";
    int shown = 0, mb = cfg->train.micro_batch, ga = train ? cfg->train.grad_accum : 1;
    int ckpt = p->checkpointing ? QLT_GRAD_CHECKPOINT_LAYER : (int)cfg->train.grad_checkpoint;
    if (train && !p->checkpointing)
        try_variant(cfg, be, train, mb, ga, cfg->data.seq_len, QLT_GRAD_CHECKPOINT_LAYER, fits, sizeof fits, &shown);
    int best_ckpt = train ? QLT_GRAD_CHECKPOINT_LAYER : ckpt;
    for (int m = mb / 2, a = ga * 2; m >= 1 && shown < 3; m /= 2, a *= 2)
        if (try_variant(cfg, be, train, m, a, cfg->data.seq_len, best_ckpt, fits, sizeof fits, &shown)) break;
    for (int s = cfg->data.seq_len / 2; s >= 128 && shown < 3; s /= 2)
        if (try_variant(cfg, be, train, 1, ga * mb, s, best_ckpt, fits, sizeof fits, &shown)) break;
    char what[512];
    qlt_memory_plan_describe(p, what, sizeof what);
    if (!shown)
        snprintf(fits, sizeof fits, "Nothing smaller that was tried fits (layer checkpointing, micro-batch down to 1, "
                 "data.seq_len down to %d): use a device with more memory, model.quant: nf4, or a smaller model",
                 cfg->data.seq_len < 256 ? cfg->data.seq_len : 128);
    return qlt_fail("this run does not fit in the memory of %s: it needs %s at micro-batch %d x %d tokens. %s%s",
                    be->device_name[0] ? be->device_name : be->name, what, p->micro_batch, p->seq,
                    shown ? "It would fit with: " : "", fits);
}
