/* bench_decode.c: `qlora-train bench --model CONFIG.json --decode N`: generation speed on a random-weight model of
 * that architecture: a prompt of --prompt-len random tokens, then N tokens one a step (greedy), through the same
 * decoder as `generate`. Prints the prompt's and the steps' tokens/s, the bytes a step must read (the frozen
 * weights as stored: NF4 codes and scales or bf16, the lm_head, the KV cache at the mean length) and the
 * bandwidth that makes, against the backend's measured copy bandwidth (the practical bound of a step that reads
 * every weight once). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_decode.h"
#include "cli/cli_model.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "infer/kv_decoder.h"

/* Bytes a weight occupies as the backend reads it. */
static double weight_bytes(const qlt_weight *w) {
    if (w->format != QLT_WFORMAT_NF4)
        return (double)w->rows * (double)w->cols * (w->format == QLT_WFORMAT_F32 ? 4.0 : 2.0);
    const qlt_nf4 *q = &w->nf4;
    return (double)(q->numel + 1) / 2 + (q->double_quant ? (double)q->nblocks + 4.0 * (double)q->nested_nblocks
                                                         : 4.0 * (double)q->nblocks);
}

/* The device's copy bandwidth in bytes/s (read + write), from timed copies of 256 MiB; 0 when unknown. */
static double copy_bandwidth(qlt_backend *be) {
    const size_t bytes = (size_t)256 << 20;
    const int64_t elems = (int64_t)(bytes / qlt_dtype_size(be->act_dtype));
    void *a = be->alloc(be, bytes), *b = be->alloc(be, bytes);
    double best = 0;
    if (a && b) {
        be->zero(be, a, bytes);
        for (int i = 0; i < 6; i++) {
            be->sync(be);
            double t0 = qlt_now_seconds();
            be->copy(be, b, a, elems);
            be->sync(be);
            double rate = 2.0 * (double)bytes / (qlt_now_seconds() - t0);
            if (rate > best) best = rate;
        }
    }
    if (a) be->free(be, a);
    if (b) be->free(be, b);
    return best;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int qlt_bench_decode(const qlt_bench_decode_opts *o) {
    qlt_config cfg;
    qlt_config_defaults(&cfg);
    char set[4096];
    snprintf(set, sizeof set, "model.path=random:%s", o->model);
    int rc = qlt_config_set(&cfg, set);
    snprintf(set, sizeof set, "model.quant=%s", o->quant);
    if (rc == 0) rc = qlt_config_set(&cfg, set);
    snprintf(set, sizeof set, "train.device=%s", o->device);
    if (rc == 0) rc = qlt_config_set(&cfg, set);
    qlt_cli_model cm;
    if (rc == 0) rc = qlt_cli_model_open(&cm, &cfg, NULL, 0);
    qlt_config_free(&cfg);
    if (rc != 0) return -1;
    const qlt_model *m = &cm.model;
    const qlt_model_config *c = &m->cfg;
    qlt_backend *be = cm.be;
    qlt_kv_decoder d;
    if (qlt_kv_decoder_init(&d, m, NULL, (int64_t)o->prompt_len + o->tokens, 512) != 0) {
        qlt_cli_model_close(&cm);
        return -1;
    }
    int32_t *prompt = qlt_xmalloc(sizeof(int32_t) * (size_t)o->prompt_len);
    qlt_rng rng;
    qlt_rng_seed(&rng, 11);
    for (int i = 0; i < o->prompt_len; i++) prompt[i] = (int32_t)qlt_rng_below(&rng, (uint64_t)c->vocab);
    float *logits = qlt_xmalloc(sizeof(float) * (size_t)c->vocab);
    be->sync(be);
    double t0 = qlt_now_seconds();
    rc = qlt_kv_decoder_step(&d, prompt, o->prompt_len, logits, NULL);
    be->sync(be);
    double t1 = qlt_now_seconds();
    for (int s = 0; s < o->tokens && rc == 0; s++) {
        int32_t next = argmax(logits, c->vocab);
        rc = qlt_kv_decoder_step(&d, &next, 1, logits, NULL);
    }
    be->sync(be);
    double t2 = qlt_now_seconds();
    if (rc == 0) {
        double weights = weight_bytes(&m->lm_head);
        for (int l = 0; l < c->n_layers; l++)
            for (int p = 0; p < QLT_PROJ_COUNT; p++) weights += weight_bytes(&m->layers[l].proj[p]);
        const double mean_len = o->prompt_len + (o->tokens + 1) / 2.0;
        const double kv = 2.0 * c->n_layers * mean_len * c->n_kv_heads * c->head_dim *
                          (double)qlt_dtype_size(be->act_dtype);
        const double step_s = (t2 - t1) / o->tokens, bytes = weights + kv, achieved = bytes / step_s;
        const double bound = copy_bandwidth(be);
        if (o->json) {
            printf("{\"model\": \"%s\", \"device\": \"%s\", \"quant\": \"%s\", \"prompt_tokens\": %d, \"new_tokens\": %d, "
                   "\"prompt_tokens_per_s\": %.1f, \"decode_tokens_per_s\": %.1f, \"step_ms\": %.4f, "
                   "\"bytes_per_step\": %.0f, \"achieved_gb_s\": %.1f, \"copy_gb_s\": %.1f, \"share_of_copy\": %.4f}\n",
                   o->model, be->name, o->quant, o->prompt_len, o->tokens, o->prompt_len / (t1 - t0), 1.0 / step_s,
                   step_s * 1e3, bytes, achieved / 1e9, bound / 1e9, bound > 0 ? achieved / bound : 0.0);
        } else {
            printf("model %s (%s), %s backend, %s base; decoding (greedy, KV cache)\n", o->model, c->arch_name,
                   be->name, o->quant);
            printf("prompt %d tokens: %.1f tokens/s; %d new tokens: %.1f tokens/s (%.3f ms a step)\n", o->prompt_len,
                   o->prompt_len / (t1 - t0), o->tokens, 1.0 / step_s, step_s * 1e3);
            printf("a step reads %.2f GB (weights as stored %.2f GB, KV cache %.3f GB at the mean length): %.0f GB/s",
                   bytes / 1e9, weights / 1e9, kv / 1e9, achieved / 1e9);
            if (bound > 0) printf(", %.0f%% of the device's copy bandwidth (%.0f GB/s)", 100 * achieved / bound, bound / 1e9);
            printf("\n");
        }
    }
    free(logits);
    free(prompt);
    qlt_kv_decoder_free(&d);
    qlt_cli_model_close(&cm);
    return rc;
}
