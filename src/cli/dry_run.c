/* dry_run.c: see dry_run.h. */
#include "cli/dry_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/env.h"
#include "common/error.h"
#include "nf4/nf4.h"
#include "train/trainer.h"

static void print_config(const qlt_config *cfg, const char *config_path) {
    printf("config (value, then where it came from):\n");
    for (int64_t i = 0; i < qlt_config_key_count(); i++) {
        char *value = qlt_config_value_text(cfg, i);
        const qlt_config_origin *o = &cfg->origin[i];
        char where[512];
        switch (o->kind) {
        case QLT_ORIGIN_FILE: snprintf(where, sizeof where, "%s:%d", config_path ? config_path : "file", o->line); break;
        case QLT_ORIGIN_SET: snprintf(where, sizeof where, "--set"); break;
        case QLT_ORIGIN_ENV:
            snprintf(where, sizeof where, "environment variable %s", qlt_env_name((qlt_env_var)o->line));
            break;
        default: snprintf(where, sizeof where, "default");
        }
        printf("  %-24s %-28s # %s\n", qlt_config_key_at(i)->name, value, where);
        free(value);
    }
}

static void print_data(const char *what, const qlt_dataset *ds) {
    if (ds->n_rows == 0) {
        printf("  %-5s none\n", what);
        return;
    }
    double slots = (double)ds->n_rows * (double)ds->seq_len;
    printf("  %-5s %lld examples -> %lld rows of %d tokens: %lld tokens (%lld with loss), %lld examples truncated, "
           "%lld bad lines skipped, packing efficiency %.1f%% (real tokens / row slots)\n",
           what, (long long)ds->n_examples, (long long)ds->n_rows, ds->seq_len, (long long)ds->n_tokens,
           (long long)ds->n_label_tokens, (long long)ds->n_truncated, (long long)ds->n_skipped,
           100.0 * (double)ds->n_tokens / slots);
}

static double weight_bytes(const qlt_weight *w) {
    double numel = (double)w->rows * (double)w->cols;
    switch (w->format) {
    case QLT_WFORMAT_NF4: return (double)qlt_nf4_bytes(w->nf4.numel, w->nf4.blocksize, w->nf4.double_quant);
    case QLT_WFORMAT_F32: return 4 * numel;
    default: return 2 * numel;
    }
}

/* The model's frozen weights as held on the backend: linear layers, embeddings, norms and biases. */
static double model_bytes(const qlt_model *m) {
    const qlt_model_config *c = &m->cfg;
    double bytes = weight_bytes(&m->embed) + (m->lm_head_shared ? 0 : weight_bytes(&m->lm_head)) + 4.0 * c->hidden;
    for (int l = 0; l < c->n_layers; l++) {
        const qlt_layer *layer = &m->layers[l];
        for (int p = 0; p < QLT_PROJ_COUNT; p++) bytes += weight_bytes(&layer->proj[p]);
        bytes += 2 * 4.0 * c->hidden;
        for (int b = 0; b < 3; b++)
            if (layer->bias[b]) bytes += 4.0 * (double)layer->proj[b].rows;
        if (layer->q_norm) bytes += 2 * 4.0 * c->head_dim;
    }
    return bytes;
}

static void print_memory(const qlt_trainer *t) {
    const double mib = 1048576.0;
    double weights = model_bytes(&t->model);
    double lora = 4.0 * sizeof(float) * (double)t->lora.n_params; /* params, grads, AdamW m and v */
    /* the arena as allocated: the largest of the planned passes (training micro-step, evaluation) */
    double acts = (double)t->graph.arena_cap + (t->checkpointing ? (double)t->recompute.arena_cap : 0);
    char label[96];
    printf("memory plan (%s backend):\n", t->be->name);
    snprintf(label, sizeof label, "weights (frozen%s)", t->model.quantized ? ", NF4" : "");
    printf("  %-48s %10.1f MiB\n", label, weights / mib);
    snprintf(label, sizeof label, "LoRA + AdamW state (%lld params x 16 bytes)", (long long)t->lora.n_params);
    printf("  %-48s %10.1f MiB\n", label, lora / mib);
    snprintf(label, sizeof label, "activation arena (%s)", t->checkpointing ? "layer checkpointing" : "no checkpointing");
    printf("  %-48s %10.1f MiB\n", label, acts / mib);
    printf("  %-48s %10.1f MiB (besides the libraries' workspaces%s)\n", "total", (weights + lora + acts) / mib,
           t->be->dequant_cache_bytes > 0 ? " and train.dequant_cache_gib" : "");
}

int qlt_cli_dry_run(qlt_config *cfg, const char *config_path) {
    print_config(cfg, config_path);
    fflush(stdout);
    cfg->data.cache = 0; /* a dry run writes nothing, the dataset cache in output.dir included */
    qlt_trainer t;
    if (qlt_trainer_init(&t, cfg, QLT_TRAINER_TRAIN) != 0) return -1;
    printf("data (data.seq_len %d, packing %s):\n", t.seq, cfg->data.packing ? "on" : "off");
    print_data("train", &t.train);
    print_data("eval", &t.eval);
    printf("steps: %lld (%lld a epoch; %d rows a step = micro_batch %d x grad_accum %d)\n", (long long)t.total_steps,
           (long long)t.steps_per_epoch, t.micro_batch * t.grad_accum, t.micro_batch, t.grad_accum);
    print_memory(&t);
    fflush(stdout);
    /* one step, timed, on whatever backend this is (it changes only the adapter in memory, which is dropped) */
    qlt_step_metrics m;
    double start = qlt_now_seconds();
    int rc = qlt_trainer_step(&t, &m);
    if (rc == 0) rc = qlt_trainer_flush(&t, &m);
    double seconds = qlt_now_seconds() - start;
    if (rc == 0)
        printf("step time: %.3f s (one step timed on the %s backend; the first step, so it includes one-time "
               "set-up%s): about %.0f s for %lld steps\n",
               seconds, t.be->name, t.graph_mode ? " and the CUDA graph capture" : "", seconds * (double)t.total_steps,
               (long long)t.total_steps);
    printf("dry run: nothing was written (output.dir %s)\n", cfg->output.dir);
    qlt_trainer_free(&t);
    return rc;
}
