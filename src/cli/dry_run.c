/* dry_run.c: see dry_run.h. */
#include "cli/dry_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/env.h"
#include "common/error.h"
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

static void print_memory(const qlt_trainer *t) {
    const double mib = 1048576.0;
    const qlt_memory_plan *p = &t->mem_plan;
    char label[96];
    if (p->total <= 0) { /* a backend that does not plan */
        printf("memory plan: the %s backend does not plan its memory\n", t->be->name);
        return;
    }
    printf("memory plan (%s backend, made before loading; the run's peak):\n", t->be->name);
    snprintf(label, sizeof label, "weights (frozen%s)", t->model.quantized ? ", NF4" : "");
    printf("  %-48s %10.1f MiB\n", label, p->weights / mib);
    snprintf(label, sizeof label, "LoRA + AdamW state (%lld params x 16 bytes)", (long long)t->lora.n_params);
    printf("  %-48s %10.1f MiB\n", label, p->lora / mib);
    snprintf(label, sizeof label, "activations (%s)", p->checkpointing ? "layer checkpointing" : "no checkpointing");
    printf("  %-48s %10.1f MiB\n", label, p->activations / mib);
    printf("  %-48s %10.1f MiB\n", "buffers and workspaces", p->buffers / mib);
    if (p->dequant_cache > 0) printf("  %-48s %10.1f MiB\n", "dequantized weights (train.dequant_cache_gib)", p->dequant_cache / mib);
    if (p->libraries > 0) printf("  %-48s %10.1f MiB\n", "CUDA libraries (cuBLAS, cuDNN, graphs)", p->libraries / mib);
    printf("  %-48s %10.1f MiB of %.1f MiB free\n", "total", (p->total - p->in_use) / mib, p->available / mib);
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
