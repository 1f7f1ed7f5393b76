/* gguf_real_check.c: the C side of scripts/gguf-real-check.sh (not a CI test): a real GGUF model loaded by
 * qlora-train against the same model dequantized by gguf-py into a Hugging Face directory
 * (scripts/gguf_to_hf.py), on the CPU backend.
 *   gguf_real_check dump-tokenizer MODEL.gguf OUT_DIR   tokenizer.json + tokenizer_config.json as built from
 *                                                       the GGUF metadata
 *   gguf_real_check encode MODEL.gguf TEXT              ids of TEXT by the GGUF's tokenizer, one line
 *   gguf_real_check logits MODEL.gguf HF_DIR IDS_FILE   logits of both models on the ids (one line of
 *                                                       space-separated ids), dense and NF4: max |difference|,
 *                                                       max |logit|, and how many differ
 *   gguf_real_check next MODEL.gguf IDS_FILE            the 5 likeliest next ids after the ids (dense GGUF
 *                                                       model), a sanity check of the model itself
 * Built against build-cpu/libqlt.a by the script. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "cpu/backend_cpu.h"
#include "formats/gguf.h"
#include "formats/gguf_tokenizer.h"
#include "model/forward.h"
#include "model/model.h"
#include "train/batch.h"

static int die(void) {
    fprintf(stderr, "gguf_real_check: %s\n", qlt_error());
    return 1;
}

/* logits [n, vocab] of m on one row of ids (labels: the next id, so the loss path has work). */
static float *logits_of(qlt_model *m, const int32_t *ids, int n) {
    qlt_backend *be = m->be;
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) labels[i] = ids[i];
    qlt_batch_buffers bb;
    if (qlt_batch_buffers_init(&bb, be, 1, n) != 0) return NULL;
    int64_t count = qlt_batch_upload(&bb, be, ids, labels, NULL);
    qlt_optim_scalars *scalars = be->alloc(be, sizeof *scalars);
    memset(scalars, 0, sizeof *scalars);
    scalars->grad_scale = 1.0f / (float)(count > 0 ? count : 1);
    void *scratch = be->alloc(be, qlt_loss_scratch_bytes(m, n));
    qlt_graph g;
    qlt_graph_init(&g, be, 1);
    qlt_forward_opts o = {.scalars = scalars, .loss_scratch = scratch};
    int hf = -1;
    for (int pass = 0; pass < 2; pass++) {
        qlt_graph_begin(&g, pass == 0);
        hf = qlt_forward(&g, m, &bb.dev, &o);
        if (pass == 0 && qlt_graph_commit_plan(&g) != 0) return NULL;
    }
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)m->cfg.vocab);
    be->logits(be, out, g.values[hf].data, &m->lm_head, n);
    qlt_graph_free(&g);
    be->free(be, scalars);
    be->free(be, scratch);
    qlt_batch_buffers_free(&bb, be);
    free(labels);
    return out;
}

static int compare(const char *gguf, const char *hf_dir, const int32_t *ids, int n, int nf4) {
    qlt_backend *be = qlt_backend_cpu_create(0);
    qlt_model_load_opts opts = {.nf4 = nf4, .nf4_blocksize = 64, .double_quant = 1};
    qlt_model a, b;
    if (qlt_model_load(&a, be, gguf, &opts) != 0 || qlt_model_load(&b, be, hf_dir, &opts) != 0) return die();
    float *la = logits_of(&a, ids, n), *lb = logits_of(&b, ids, n);
    if (!la || !lb) return die();
    int64_t numel = (int64_t)n * a.cfg.vocab, differ = 0;
    double max_diff = 0, max_ref = 0;
    for (int64_t i = 0; i < numel; i++) {
        double d = fabs((double)la[i] - (double)lb[i]);
        if (d > max_diff || isnan(d)) max_diff = d;
        if (fabs(lb[i]) > max_ref) max_ref = fabs(lb[i]);
        differ += memcmp(&la[i], &lb[i], 4) != 0;
    }
    printf("%s: %d tokens x %d vocab: max |GGUF - gguf-py safetensors| = %.9g (max |logit| %.6g); %lld of %lld "
           "logits differ\n", nf4 ? "nf4 (block 64, double quant)" : "dense float32", n, a.cfg.vocab, max_diff, max_ref,
           (long long)differ, (long long)numel);
    free(la);
    free(lb);
    qlt_model_free(&a);
    qlt_model_free(&b);
    be->destroy(be);
    return max_diff == 0 ? 0 : 2;
}

/* Reads one line of space-separated ids (at most cap). */
static int read_ids(const char *path, int32_t *ids, int cap) {
    char *text;
    if (qlt_read_file(path, &text, NULL) != 0) return -1;
    int n = 0;
    for (char *p = text, *end; n < cap; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[n++] = (int32_t)v;
    }
    free(text);
    if (n < 2) return qlt_fail("%s holds fewer than 2 ids", path);
    return n;
}

static int next_tokens(const char *gguf, const int32_t *ids, int n) {
    qlt_backend *be = qlt_backend_cpu_create(0);
    qlt_model m;
    if (qlt_model_load(&m, be, gguf, NULL) != 0) return die();
    float *l = logits_of(&m, ids, n);
    if (!l) return die();
    const float *last = l + (size_t)(n - 1) * (size_t)m.cfg.vocab;
    int top[5] = {-1, -1, -1, -1, -1};
    for (int k = 0; k < 5; k++)
        for (int v = 0; v < m.cfg.vocab; v++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= top[j] == v;
            if (!taken && (top[k] < 0 || last[v] > last[top[k]])) top[k] = v;
        }
    for (int k = 0; k < 5; k++) printf(k ? " %d" : "%d", top[k]);
    printf("\n");
    free(l);
    qlt_model_free(&m);
    be->destroy(be);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "dump-tokenizer") == 0) {
        qlt_gguf g;
        char *json, *cfg;
        if (qlt_gguf_open(&g, argv[2]) != 0 || qlt_gguf_tokenizer_json(&g, &json, &cfg) != 0) return die();
        if (qlt_mkdirs(argv[3]) != 0) return die();
        char *p1 = qlt_path_join(argv[3], "tokenizer.json"), *p2 = qlt_path_join(argv[3], "tokenizer_config.json");
        if (qlt_write_file_atomic(p1, json, strlen(json)) != 0 || qlt_write_file_atomic(p2, cfg, strlen(cfg)) != 0)
            return die();
        free(p1);
        free(p2);
        free(json);
        free(cfg);
        qlt_gguf_close(&g);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "encode") == 0) {
        qlt_tokenizer *tok;
        qlt_ids ids = {0};
        if (qlt_gguf_tokenizer_load_file(&tok, argv[2]) != 0) return die();
        if (qlt_tokenizer_encode(tok, argv[3], strlen(argv[3]), &ids) != 0) return die();
        for (int64_t i = 0; i < ids.len; i++) printf(i ? " %d" : "%d", ids.data[i]);
        printf("\n");
        qlt_ids_free(&ids);
        qlt_tokenizer_free(tok);
        return 0;
    }
    static int32_t ids[4096];
    if (argc == 4 && strcmp(argv[1], "next") == 0) {
        int n = read_ids(argv[3], ids, 4096);
        return n < 0 ? die() : next_tokens(argv[2], ids, n);
    }
    if (argc == 5 && strcmp(argv[1], "logits") == 0) {
        int n = read_ids(argv[4], ids, 4096);
        if (n < 0) return die();
        int rc = compare(argv[2], argv[3], ids, n, 0);
        int rc_nf4 = compare(argv[2], argv[3], ids, n, 1);
        return rc ? rc : rc_nf4;
    }
    fprintf(stderr, "usage: gguf_real_check dump-tokenizer MODEL.gguf OUT_DIR | encode MODEL.gguf TEXT | "
                    "logits MODEL.gguf HF_DIR IDS_FILE | next MODEL.gguf IDS_FILE\n");
    return 2;
}
