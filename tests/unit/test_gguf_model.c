/* test_gguf_model.c: models from GGUF files (src/model/model_gguf.c, model_config.c's GGUF branch),
 * against the same models from safetensors. The fixtures (tests/data/gguf, scripts/gguf_fixtures.py) are
 * the tiny fixtures converted with llama.cpp's gguf-py writer and llama.cpp's q/k row permutation:
 *   - the architecture read from GGUF metadata equals config.json's;
 *   - F32 / BF16 files give logits bit-identical to the safetensors model of the same weights (tolerance 0:
 *     the same float32 weights go through the same CPU ops), dense and NF4;
 *   - a Q4_1 file's q/k weights and Q8_0 embedding equal gguf-py's dequantization with the permutation
 *     undone (bit for bit);
 *   - missing tensors, wrong shapes and unsupported architectures are one-line errors. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "cpu/backend_cpu.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/forward.h"
#include "model/model.h"
#include "test_util.h"
#include "train/batch.h"

static char *gguf_fixture(const char *file) {
    char *p = NULL;
    if (asprintf(&p, "%s/gguf/%s", QLT_TEST_DATA, file) < 0) abort();
    return p;
}

/* Logits [batch * seq, vocab] of model m on the golden batch of fixture `name` (heap; *n = batch * seq). */
static float *golden_logits(qlt_model *m, const char *name, int64_t *n) {
    qlt_backend *be = m->be;
    int32_t *ids, *labels;
    int batch, seq;
    test_golden_batch(name, &ids, &labels, &batch, &seq);
    qlt_batch_buffers bb;
    cr_assert_eq(qlt_batch_buffers_init(&bb, be, batch, seq, m->cfg.sliding_window), 0);
    int64_t count = qlt_batch_upload(&bb, be, ids, labels, NULL);
    qlt_optim_scalars *scalars = be->alloc(be, sizeof *scalars);
    memset(scalars, 0, sizeof *scalars);
    scalars->grad_scale = 1.0f / (float)count;
    *n = (int64_t)batch * seq;
    void *scratch = be->alloc(be, qlt_loss_scratch_bytes(m, *n));
    qlt_graph g;
    qlt_graph_init(&g, be, 1);
    qlt_forward_opts o = {.scalars = scalars, .loss_scratch = scratch};
    int hf = -1;
    for (int pass = 0; pass < 2; pass++) {
        qlt_graph_begin(&g, pass == 0);
        hf = qlt_forward(&g, m, &bb.dev, &o);
        if (pass == 0) cr_assert_eq(qlt_graph_commit_plan(&g), 0);
    }
    float *logits = malloc(sizeof(float) * (size_t)(*n * m->cfg.vocab));
    be->logits(be, logits, g.values[hf].data, &m->lm_head, *n);
    qlt_graph_free(&g);
    be->free(be, scalars);
    be->free(be, scratch);
    qlt_batch_buffers_free(&bb, be);
    free(ids);
    free(labels);
    return logits;
}

/* A fixture directory whose model.safetensors is `weights` of fixture `name` (a temp dir with a link). */
static char *fixture_dir_with(const char *name, const char *weights) {
    char *dir = test_fixture_path(name, NULL);
    if (strcmp(weights, "model.safetensors") == 0) return dir;
    char *tmp = test_tmpdir();
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/ && ln -s %s/%s %s/model.safetensors", dir, tmp, dir, weights, tmp);
    cr_assert_eq(system(cmd), 0);
    free(dir);
    return tmp;
}

static int64_t count_unequal(const float *a, const float *b, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], 4) != 0;
    return k;
}

typedef struct pair_case {
    const char *fixture, *weights, *gguf;
} pair_case;

static const pair_case pairs[] = {
    {"tiny-llama", "model.safetensors", "tiny-llama.f32.gguf"},
    {"tiny-qwen2", "model.bf16.safetensors", "tiny-qwen2.bf16.gguf"},
    {"tiny-qwen3", "model.bf16.safetensors", "tiny-qwen3.bf16.gguf"},
};

Test(gguf_model, config_from_metadata_equals_config_json) {
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char *dir = test_fixture_path(pairs[i].fixture, NULL), *path = gguf_fixture(pairs[i].gguf);
        qlt_model_config hf, gg;
        cr_assert_eq(qlt_model_config_load(&hf, dir), 0, "%s", qlt_error());
        qlt_gguf g;
        cr_assert_eq(qlt_gguf_open(&g, path), 0, "%s", qlt_error());
        cr_assert_eq(qlt_model_config_from_gguf(&gg, &g), 0, "%s", qlt_error());
        cr_expect_eq(gg.arch, hf.arch, "%s", path);
        cr_expect_str_eq(gg.arch_name, hf.arch_name);
        cr_expect(gg.hidden == hf.hidden && gg.n_layers == hf.n_layers && gg.n_heads == hf.n_heads &&
                      gg.n_kv_heads == hf.n_kv_heads && gg.head_dim == hf.head_dim && gg.intermediate == hf.intermediate &&
                      gg.vocab == hf.vocab,
                  "%s: shape differs from config.json", path);
        cr_expect_eq(gg.rms_eps, hf.rms_eps, "%s: rms_eps %g vs %g", path, gg.rms_eps, hf.rms_eps);
        cr_expect_eq(gg.rope_theta, hf.rope_theta, "%s", path);
        cr_expect_eq(gg.rope_type, hf.rope_type, "%s", path);
        cr_expect_eq(gg.tie_word_embeddings, hf.tie_word_embeddings, "%s: tied", path);
        cr_expect_eq(gg.attention_bias, hf.attention_bias, "%s: bias", path);
        cr_expect_eq(gg.qk_norm, hf.qk_norm, "%s: qk_norm", path);
        cr_expect_eq(gg.context_length, hf.context_length, "%s: context", path);
        qlt_gguf_close(&g);
        free(dir);
        free(path);
    }
}

/* Dense and NF4 (block 64, double quant): the GGUF model's logits equal the safetensors model's. */
Test(gguf_model, logits_equal_safetensors_model) {
    const qlt_model_load_opts variants[2] = {{0}, {.nf4 = 1, .nf4_blocksize = 64, .double_quant = 1}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        for (int v = 0; v < 2; v++) {
            qlt_backend *be = qlt_backend_cpu_create(0, 1);
            char *dir = fixture_dir_with(pairs[i].fixture, pairs[i].weights), *path = gguf_fixture(pairs[i].gguf);
            qlt_model hf, gg;
            cr_assert_eq(qlt_model_load(&hf, be, dir, &variants[v]), 0, "%s", qlt_error());
            cr_assert_eq(qlt_model_load(&gg, be, path, &variants[v]), 0, "%s", qlt_error());
            cr_expect_eq(gg.quantized, v == 1);
            int64_t n;
            float *a = golden_logits(&hf, pairs[i].fixture, &n), *b = golden_logits(&gg, pairs[i].fixture, &n);
            int64_t numel = n * hf.cfg.vocab;
            cr_expect_eq(count_unequal(b, a, numel), 0, "%s (%s): %lld of %lld logits differ (max rel %.3g)", path,
                         v ? "nf4" : "dense", (long long)count_unequal(b, a, numel), (long long)numel,
                         test_rel_err(b, a, numel));
            free(a);
            free(b);
            qlt_model_free(&hf);
            qlt_model_free(&gg);
            if (strcmp(pairs[i].weights, "model.safetensors") != 0) qlt_remove_tree(dir);
            free(dir);
            free(path);
            be->destroy(be);
        }
    }
}

/* Q4_1 weights (Q8_0 embeddings, Q5_1 lm_head): every layer's q and k weights and the embedding equal
 * gguf-py's dequantization (with llama.cpp's permutation undone for q and k), bit for bit. */
Test(gguf_model, quantized_file_dequantizes_as_gguf_py) {
    qlt_backend *be = qlt_backend_cpu_create(0, 1);
    char *path = gguf_fixture("tiny-llama.q4_1.gguf"), *exp_path = gguf_fixture("tiny-llama.q4_1.expected.safetensors");
    qlt_model m;
    cr_assert_eq(qlt_model_load(&m, be, path, NULL), 0, "%s", qlt_error());
    qlt_st_file e;
    cr_assert_eq(qlt_st_open(&e, exp_path), 0, "%s", qlt_error());
    int checked = 0;
    for (int l = 0; l <= m.cfg.n_layers; l++) {
        for (int p = 0; p < 2; p++) {
            char name[128];
            const qlt_weight *w = l < m.cfg.n_layers ? &m.layers[l].proj[p] : &m.embed;
            if (l < m.cfg.n_layers)
                snprintf(name, sizeof name, "model.layers.%d.self_attn.%s.weight", l, qlt_proj_name((qlt_proj)p));
            else if (p == 0)
                snprintf(name, sizeof name, "model.embed_tokens.weight");
            else
                continue;
            const qlt_st_tensor *t = qlt_st_find(&e, name);
            cr_assert(t && t->numel == w->rows * w->cols, "%s", name);
            cr_assert_eq(w->format, QLT_WFORMAT_F32);
            int64_t bad = count_unequal(w->data, t->data, t->numel);
            cr_expect_eq(bad, 0, "%s: %lld of %lld values differ from gguf-py's", name, (long long)bad,
                         (long long)t->numel);
            checked++;
        }
    }
    cr_expect_eq(checked, 2 * m.cfg.n_layers + 1);
    qlt_model_free(&m);
    qlt_st_close(&e);
    free(path);
    free(exp_path);
    be->destroy(be);
}

/* Copies a fixture with the first occurrence of `from` replaced by `to` (same length); returns the path. */
static char *patched_copy(const char *fixture, const char *from, const char *to, char **dir_out) {
    char *src = gguf_fixture(fixture);
    char *data;
    size_t len;
    cr_assert_eq(qlt_read_file(src, &data, &len), 0, "%s", qlt_error());
    char *at = memmem(data, len, from, strlen(from));
    cr_assert(at && strlen(from) == strlen(to), "%s not in %s", from, fixture);
    memcpy(at, to, strlen(to));
    *dir_out = test_tmpdir();
    char *path = qlt_path_join(*dir_out, "patched.gguf");
    test_write_bytes(path, data, len);
    free(data);
    free(src);
    return path;
}

static void expect_load_error(const char *path, const char *needle) {
    qlt_backend *be = qlt_backend_cpu_create(0, 1);
    qlt_model m;
    cr_expect_eq(qlt_model_load(&m, be, path, NULL), -1, "loading %s should fail", path);
    cr_expect(strstr(qlt_error(), path) != NULL, "error names the file: %s", qlt_error());
    cr_expect(strstr(qlt_error(), needle) != NULL, "error mentions '%s': %s", needle, qlt_error());
    cr_expect(strchr(qlt_error(), '\n') == NULL, "one line: %s", qlt_error());
    be->destroy(be);
}

Test(gguf_model, bad_models_are_one_line_errors) {
    char *dir;
    char *path = patched_copy("tiny-qwen2.bf16.gguf", "blk.1.ffn_up.weight", "blk.1.ffn_uX.weight", &dir);
    expect_load_error(path, "tensor 'blk.1.ffn_up.weight' is missing");
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    path = patched_copy("tiny-qwen2.bf16.gguf", "qwen2", "gpt-2", &dir);
    expect_load_error(path, "general.architecture 'gpt-2' is not supported");
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    /* a key renamed away: a required hyper-parameter is missing */
    path = patched_copy("tiny-llama.f32.gguf", "llama.feed_forward_length", "llama.feed_forward_lengtX", &dir);
    expect_load_error(path, "missing key 'llama.feed_forward_length'");
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    /* the metadata says 4 heads of 32 where the file has 6 of 16: attn_q rows no longer match */
    path = patched_copy("tiny-qwen3.bf16.gguf", "blk.0.attn_q_norm.weight", "blk.0.attn_q_norX.weight", &dir);
    expect_load_error(path, "tensor 'blk.0.attn_q_norm.weight' is missing");
    qlt_remove_tree(dir);
    free(dir);
    free(path);
    char *missing = gguf_fixture("no-such-model.gguf");
    expect_load_error(missing, "cannot open");
    free(missing);
}
