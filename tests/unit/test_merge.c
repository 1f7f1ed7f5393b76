/* test_merge.c: `qlora-train merge`: the merged model, loaded back as a plain model (model.quant none, no
 * adapter), gives the logits of base + adapter on the CPU path, for both --onto modes and a bitsandbytes
 * checkpoint; bf16 output is the f32 merge rounded once; sharding, tied embeddings, config.json and the
 * files beside the weights; bad input gives one-line errors.
 *
 * Why 1e-5 of the logits' max for f32: the merged weight W + scale B A is the exact sum rounded once to
 * float32 (relative 6e-8 a weight), where base + adapter computes W x and scale B (A x) apart in float32;
 * both are the same function to float32 rounding, and over these layers that stays below 1e-6 of the
 * logits (measured: ~2e-7); dropping the adapter or merging onto the other base moves them by >1e-3. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "cpu/backend_cpu.h"
#include "model/forward.h"
#include "model/lora.h"
#include "model/merge.h"
#include "test_util.h"
#include "train/batch.h"

/* Logits [N, V] of the model in dir (NF4 on load when nf4) with the PEFT adapter in adapter (or none) on
 * the golden batch of fixture. */
static float *logits_of(const char *dir, const char *fixture, int nf4, const char *adapter, int64_t *numel) {
    qlt_backend *be = qlt_backend_cpu_create(0, 1);
    qlt_model m;
    qlt_model_load_opts opts = {.nf4 = nf4, .nf4_blocksize = 64, .double_quant = 1};
    cr_assert_eq(qlt_model_load(&m, be, dir, &opts), 0, "%s", qlt_error());
    qlt_lora lora;
    if (adapter) {
        int r, rs;
        float alpha, dropout;
        unsigned targets;
        cr_assert_eq(qlt_lora_read_peft_config(adapter, &r, &alpha, &targets, &rs, &dropout), 0, "%s", qlt_error());
        cr_assert_eq(qlt_lora_create(&lora, &m, r, alpha, targets, rs, dropout), 0, "%s", qlt_error());
        cr_assert_eq(qlt_lora_load_peft(&lora, adapter), 0, "%s", qlt_error());
    }
    int32_t *ids, *labels;
    int batch, seq;
    test_golden_batch(fixture, &ids, &labels, &batch, &seq);
    qlt_batch_buffers bb;
    cr_assert_eq(qlt_batch_buffers_init(&bb, be, batch, seq, m.cfg.sliding_window), 0);
    qlt_batch_upload(&bb, be, ids, labels, NULL);
    qlt_optim_scalars s = {0};
    void *scratch = malloc(qlt_loss_scratch_bytes(&m, (int64_t)batch * seq));
    qlt_graph gr;
    qlt_graph_init(&gr, be, 1);
    qlt_forward_opts o = {.lora = adapter ? &lora : NULL, .scalars = &s, .loss_scratch = scratch};
    int hf = -1;
    for (int pass = 0; pass < 2; pass++) {
        qlt_graph_begin(&gr, pass == 0);
        hf = qlt_forward(&gr, &m, &bb.dev, &o);
        if (pass == 0) cr_assert_eq(qlt_graph_commit_plan(&gr), 0);
    }
    *numel = (int64_t)batch * seq * m.cfg.vocab;
    float *logits = malloc(sizeof(float) * (size_t)*numel);
    be->logits(be, logits, gr.values[hf].data, &m.lm_head, (int64_t)batch * seq);
    qlt_graph_free(&gr);
    free(scratch);
    qlt_batch_buffers_free(&bb, be);
    if (adapter) qlt_lora_free(&lora);
    qlt_model_free(&m);
    be->destroy(be);
    free(ids);
    free(labels);
    return logits;
}

/* A config file naming model dir with model.quant nf4 or none; heap path. */
static char *write_config(const char *tmp, const char *model_dir, int nf4) {
    char *path = qlt_path_join(tmp, nf4 ? "nf4.yaml" : "none.yaml"), *text = NULL;
    if (asprintf(&text, "model: {path: %s, quant: %s}\n", model_dir, nf4 ? "nf4" : "none") < 0) abort();
    test_write_text(path, text);
    free(text);
    return path;
}

/* Runs `qlora-train merge ARGS`; expects exit status want; returns the output (heap). */
static char *merge_cli(int want, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *merge_cli(int want, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *args = NULL, *cmd = NULL, *out = NULL;
    if (vasprintf(&args, fmt, ap) < 0) abort();
    va_end(ap);
    if (asprintf(&cmd, "merge %s", args) < 0) abort();
    int rc = test_run_cli(NULL, cmd, &out);
    if (want == 0) cr_assert_eq(rc, 0, "merge %s: exit %d\n%s", args, rc, out);
    else cr_assert_neq(rc, 0, "merge %s should fail:\n%s", args, out);
    free(args);
    free(cmd);
    return out;
}

/* The output of a failing command is one line: "qlora-train: error: ..." holding needle. */
static void expect_one_error(const char *out, const char *needle) {
    cr_expect(strncmp(out, "qlora-train: error: ", 20) == 0, "not an error line: %s", out);
    const char *nl = strchr(out, '\n');
    cr_expect(nl && nl[1] == '\0', "not one line: %s", out);
    cr_expect(strstr(out, needle) != NULL, "error lacks '%s': %s", needle, out);
}

typedef struct merge_case {
    char model[32];
    int dequantized; /* --onto dequantized against the NF4 base (model.quant nf4), else original (quant none) */
} merge_case;

ParameterizedTestParameters(merge, f32_gives_base_plus_adapter) {
    static merge_case cases[] = {{"tiny-qwen2", 1}, {"tiny-llama", 1}, {"tiny-qwen3", 1}, {"tiny-phi3", 1},
                                 {"tiny-qwen2", 0}, {"tiny-llama", 0}, {"tiny-qwen3", 0}, {"tiny-phi3", 0}};
    return cr_make_param_array(merge_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(merge_case *c, merge, f32_gives_base_plus_adapter) {
    char *tmp = test_tmpdir(), *src = test_fixture_path(c->model, NULL), *adapter = test_fixture_path(c->model, "adapter-init");
    char *cfg = write_config(tmp, src, c->dequantized), *out_dir = qlt_path_join(tmp, "merged");
    free(merge_cli(0, "--config %s --adapter %s --out %s --dtype f32 --onto %s", cfg, adapter, out_dir,
                   c->dequantized ? "dequantized" : "original"));
    int64_t n, n2;
    float *ref = logits_of(src, c->model, c->dequantized, adapter, &n);
    float *got = logits_of(out_dir, c->model, 0, NULL, &n2);
    cr_assert_eq(n, n2);
    double err = test_rel_err(got, ref, n);
    if (getenv("QLT_TEST_VERBOSE")) fprintf(stderr, "merge %s onto %d: rel err %.3g\n", c->model, c->dequantized, err);
    cr_expect(err <= 1e-5, "%s onto %s: merged logits off by %.3g of the max", c->model,
              c->dequantized ? "dequantized" : "original", err);
    /* the check can fail: the base alone, or base + adapter on the other base, is far off */
    float *base = logits_of(src, c->model, c->dequantized, NULL, &n2);
    float *other = logits_of(src, c->model, !c->dequantized, adapter, &n2);
    cr_expect_gt(test_rel_err(base, ref, n), 1e-3);
    cr_expect_gt(test_rel_err(got, other, n), 1e-4);
    free(base);
    free(other);
    free(ref);
    free(got);
    qlt_remove_tree(tmp);
    free(tmp);
    free(src);
    free(adapter);
    free(cfg);
    free(out_dir);
}

/* Tensor name's values as float32 (heap) from a model dir. */
static float *dir_tensor(const char *dir, const char *name, qlt_dtype *dtype, int64_t *numel) {
    qlt_st_dir d;
    cr_assert_eq(qlt_st_dir_open(&d, dir), 0, "%s", qlt_error());
    const qlt_st_tensor *t = qlt_st_dir_find(&d, name);
    cr_assert(t, "%s: no tensor %s", dir, name);
    float *v = malloc(sizeof(float) * (size_t)t->numel);
    qlt_st_read_f32(t, v);
    if (dtype) *dtype = t->dtype;
    if (numel) *numel = t->numel;
    qlt_st_dir_close(&d);
    return v;
}

/* bf16 output is the merge rounded once: each value within half a bf16 step of the f32 merge,
 * almost all equal to bf16(f32 merge), and the logits within bf16 rounding of the f32 merge's. */
Test(merge, bf16_is_the_merge_rounded_once) {
    const char *model = "tiny-llama";
    char *tmp = test_tmpdir(), *src = test_fixture_path(model, NULL), *adapter = test_fixture_path(model, "adapter-init");
    char *cfg = write_config(tmp, src, 1), *f32 = qlt_path_join(tmp, "f32"), *bf16 = qlt_path_join(tmp, "bf16");
    free(merge_cli(0, "--config %s --adapter %s --out %s --dtype f32", cfg, adapter, f32));
    free(merge_cli(0, "--config %s --adapter %s --out %s --dtype bf16", cfg, adapter, bf16));
    const char *names[] = {"model.layers.0.self_attn.q_proj.weight", "model.layers.2.mlp.down_proj.weight",
                           "model.embed_tokens.weight", "model.norm.weight"};
    for (int k = 0; k < 4; k++) {
        qlt_dtype dt;
        int64_t n;
        float *a = dir_tensor(f32, names[k], NULL, &n), *b = dir_tensor(bf16, names[k], &dt, NULL);
        cr_expect_eq(dt, QLT_DTYPE_BF16, "%s is %s", names[k], qlt_dtype_name(dt));
        int64_t far = 0, differ = 0;
        for (int64_t i = 0; i < n; i++) {
            /* half a bf16 step at a's binade: 2^(exponent - 8) */
            far += a[i] != 0 && fabs((double)b[i] - a[i]) > ldexp(1.0, ilogbf(a[i]) - 8);
            differ += b[i] != qlt_bf16_to_f32(qlt_f32_to_bf16(a[i]));
        }
        cr_expect_eq(far, 0, "%s: %lld values further than half a bf16 step from the f32 merge", names[k], (long long)far);
        cr_expect(differ * 1000 <= n, "%s: %lld of %lld values differ from bf16(f32 merge)", names[k], (long long)differ,
                  (long long)n);
        free(a);
        free(b);
    }
    int64_t n, n2;
    float *ref = logits_of(f32, model, 0, NULL, &n), *got = logits_of(bf16, model, 0, NULL, &n2);
    double err = test_rel_err(got, ref, n);
    cr_expect(err <= 2e-2 && err > 0, "bf16 merge logits off by %.3g", err);
    char *text = NULL;
    char *cpath = qlt_path_join(bf16, "config.json");
    cr_assert_eq(qlt_read_file(cpath, &text, NULL), 0);
    cr_expect(strstr(text, "\"torch_dtype\":\t\"bfloat16\"") != NULL, "%s", text);
    cr_expect(strstr(text, "\"dtype\":\t\"bfloat16\"") != NULL, "transformers 5's dtype key follows: %s", text);
    cr_expect(strstr(text, "\"onto\":\t\"dequantized\"") != NULL, "%s", text);
    free(text);
    free(cpath);
    free(ref);
    free(got);
    qlt_remove_tree(tmp);
    free(tmp);
    free(src);
    free(adapter);
    free(cfg);
    free(f32);
    free(bf16);
}

/* A bitsandbytes checkpoint (written by `qlora-train quantize`): merged onto its own NF4 codes by default,
 * giving the logits of that checkpoint + adapter; --onto original is a one-line error; quantization_config
 * leaves config.json. */
Test(merge, bitsandbytes_checkpoint) {
    const char *model = "tiny-qwen2";
    char *tmp = test_tmpdir(), *src = test_fixture_path(model, NULL), *adapter = test_fixture_path(model, "adapter-init");
    char *qdir = qlt_path_join(tmp, "q"), *out_dir = qlt_path_join(tmp, "merged"), *args = NULL, *out = NULL;
    if (asprintf(&args, "quantize %s %s", src, qdir) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    free(out);
    char *cfg = write_config(tmp, qdir, 0);
    free(merge_cli(0, "--config %s --adapter %s --out %s --dtype f32", cfg, adapter, out_dir));
    int64_t n, n2;
    float *ref = logits_of(qdir, model, 0, adapter, &n), *got = logits_of(out_dir, model, 0, NULL, &n2);
    double err = test_rel_err(got, ref, n);
    cr_expect(err <= 1e-5, "merge of the bnb checkpoint off by %.3g", err);
    char *text = NULL, *cpath = qlt_path_join(out_dir, "config.json");
    cr_assert_eq(qlt_read_file(cpath, &text, NULL), 0);
    cr_expect(strstr(text, "quantization_config") == NULL, "%s", text);
    cr_expect(strstr(text, "bitsandbytes checkpoint's own") != NULL, "%s", text);
    free(text);
    char *other = qlt_path_join(tmp, "other");
    out = merge_cli(1, "--config %s --adapter %s --out %s --onto original", cfg, adapter, other);
    expect_one_error(out, "is a bitsandbytes 4-bit checkpoint");
    cr_expect(!qlt_dir_exists(other));
    free(out);
    free(other);
    free(cpath);
    free(ref);
    free(got);
    free(args);
    qlt_remove_tree(tmp);
    free(tmp);
    free(src);
    free(adapter);
    free(cfg);
    free(qdir);
    free(out_dir);
}

/* --max-shard-size splits the output with an index, tensor for tensor the same as one file; tied
 * embeddings write no lm_head.weight, untied ones do. */
Test(merge, shards_and_tied_embeddings) {
    const char *models[2] = {"tiny-qwen3", "tiny-llama"}; /* tied, untied */
    for (int k = 0; k < 2; k++) {
        char *tmp = test_tmpdir(), *src = test_fixture_path(models[k], NULL);
        char *adapter = test_fixture_path(models[k], "adapter-init"), *cfg = write_config(tmp, src, 0);
        char *one = qlt_path_join(tmp, "one"), *many = qlt_path_join(tmp, "many");
        free(merge_cli(0, "--config %s --adapter %s --out %s --dtype bf16", cfg, adapter, one));
        free(merge_cli(0, "--config %s --adapter %s --out %s --dtype bf16 --max-shard-size 40KB", cfg, adapter, many));
        char *index = qlt_path_join(many, "model.safetensors.index.json"), *single = qlt_path_join(many, "model.safetensors");
        cr_expect(qlt_file_exists(index) && !qlt_file_exists(single), "%s: no index", models[k]);
        qlt_st_dir a, b;
        cr_assert_eq(qlt_st_dir_open(&a, one), 0, "%s", qlt_error());
        cr_assert_eq(qlt_st_dir_open(&b, many), 0, "%s", qlt_error());
        cr_expect_eq(a.n_files, 1);
        cr_expect_gt(b.n_files, 2);
        int total = 0;
        for (int i = 0; i < b.n_files; i++) total += b.files[i].n_tensors;
        cr_expect_eq(total, a.files[0].n_tensors);
        for (int i = 0; i < a.files[0].n_tensors; i++) {
            const qlt_st_tensor *x = &a.files[0].tensors[i], *y = qlt_st_dir_find(&b, x->name);
            cr_expect(y && y->nbytes == x->nbytes && memcmp(x->data, y->data, x->nbytes) == 0, "%s differs", x->name);
        }
        cr_expect_eq(qlt_st_dir_find(&a, "lm_head.weight") != NULL, k == 1, "%s: lm_head.weight %s", models[k],
                     k ? "missing" : "written though tied");
        qlt_st_dir_close(&a);
        qlt_st_dir_close(&b);
        qlt_remove_tree(tmp);
        free(index);
        free(single);
        free(tmp);
        free(src);
        free(adapter);
        free(cfg);
        free(one);
        free(many);
    }
}

/* The files beside the weights: tokenizer files copied, generation_config.json copied when present, else a
 * minimal one with config.json's bos / eos. */
Test(merge, tokenizer_and_generation_config) {
    char *tmp = test_tmpdir(), *src = test_fixture_path("tiny-llama", NULL), *adapter = test_fixture_path("tiny-llama", "adapter-init");
    char *model = qlt_path_join(tmp, "model");
    cr_assert_eq(qlt_mkdirs(model), 0);
    const char *copy[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char *from = qlt_path_join(src, copy[i]), *to = qlt_path_join(model, copy[i]), *data = NULL;
        size_t len;
        cr_assert_eq(qlt_read_file(from, &data, &len), 0);
        test_write_bytes(to, data, len);
        free(data);
        free(from);
        free(to);
    }
    char *tj = qlt_path_join(model, "tokenizer.json"), *tc = qlt_path_join(model, "tokenizer_config.json");
    test_write_text(tj, "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}");
    test_write_text(tc, "{\"eos_token\": \"</s>\"}");
    char *cfg = write_config(tmp, model, 0), *out_dir = qlt_path_join(tmp, "merged");
    free(merge_cli(0, "--config %s --adapter %s --out %s", cfg, adapter, out_dir));
    const char *want[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "config.json"};
    for (int i = 0; i < 4; i++) {
        char *p = qlt_path_join(out_dir, want[i]);
        cr_expect(qlt_file_exists(p), "no %s", want[i]);
        free(p);
    }
    char *gen = qlt_path_join(out_dir, "generation_config.json"), *text = NULL;
    cr_assert_eq(qlt_read_file(gen, &text, NULL), 0);
    cr_expect(strstr(text, "\"bos_token_id\":\t1") && strstr(text, "\"eos_token_id\":\t2"), "%s", text);
    free(text);
    /* the source's dtype is the default: float32 here */
    char *cpath = qlt_path_join(out_dir, "config.json");
    cr_assert_eq(qlt_read_file(cpath, &text, NULL), 0);
    cr_expect(strstr(text, "\"torch_dtype\":\t\"float32\"") != NULL, "%s", text);
    cr_expect(strstr(text, "\"onto\":\t\"original\"") != NULL, "model.quant none: onto original by default: %s", text);
    free(text);
    free(cpath);
    free(gen);
    free(tj);
    free(tc);
    qlt_remove_tree(tmp);
    free(tmp);
    free(src);
    free(adapter);
    free(model);
    free(cfg);
    free(out_dir);
}

/* Bad input: one line naming the file / option / tensor, non-zero exit, nothing left behind. */
Test(merge, bad_input) {
    char *tmp = test_tmpdir(), *src = test_fixture_path("tiny-qwen3", NULL);
    char *adapter = test_fixture_path("tiny-qwen3", "adapter-init"), *llama_adapter = test_fixture_path("tiny-llama", "adapter-init");
    char *cfg = write_config(tmp, src, 1), *none_cfg = write_config(tmp, src, 0), *out_dir = qlt_path_join(tmp, "out");
    char *out = merge_cli(1, "--config %s --out %s", cfg, out_dir);
    expect_one_error(out, "--adapter");
    free(out);
    out = merge_cli(1, "--config %s --adapter %s", cfg, adapter);
    expect_one_error(out, "--out");
    free(out);
    out = merge_cli(1, "--config %s --adapter %s --out %s", cfg, llama_adapter, out_dir);
    expect_one_error(out, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    cr_expect(strstr(out, "another model") != NULL, "%s", out);
    free(out);
    cr_expect(!qlt_dir_exists(out_dir), "a failed merge left %s", out_dir);
    out = merge_cli(1, "--config %s --adapter %s --out %s --onto dequantized", none_cfg, adapter, out_dir);
    expect_one_error(out, "model.quant: none");
    free(out);
    out = merge_cli(1, "--config %s --adapter %s --out %s --dtype q8_0", cfg, adapter, out_dir);
    expect_one_error(out, "--format gguf");
    free(out);
    out = merge_cli(1, "--config %s --adapter %s --out %s --onto halfway", cfg, adapter, out_dir);
    expect_one_error(out, "--onto 'halfway'");
    free(out);
    /* a non-empty --out is refused, and left as it was */
    cr_assert_eq(qlt_mkdirs(out_dir), 0);
    char *keep = qlt_path_join(out_dir, "keep.txt");
    test_write_text(keep, "mine");
    out = merge_cli(1, "--config %s --adapter %s --out %s", cfg, adapter, out_dir);
    expect_one_error(out, out_dir);
    cr_expect(strstr(out, "not empty") != NULL, "%s", out);
    cr_expect(qlt_file_exists(keep));
    free(out);
    /* an empty one is fine */
    char *empty = qlt_path_join(tmp, "empty");
    cr_assert_eq(qlt_mkdirs(empty), 0);
    free(merge_cli(0, "--config %s --adapter %s --out %s/", cfg, adapter, empty)); /* a trailing slash too */
    char *weights = qlt_path_join(empty, "model.safetensors");
    cr_expect(qlt_file_exists(weights));
    free(weights);
    /* --out that cannot be created: below a regular file */
    char *unwritable = qlt_path_join(keep, "merged");
    out = merge_cli(1, "--config %s --adapter %s --out %s", cfg, adapter, unwritable);
    expect_one_error(out, unwritable);
    free(out);
    /* an adapter directory without adapter_config.json */
    out = merge_cli(1, "--config %s --adapter %s --out %s/x", cfg, tmp, tmp);
    expect_one_error(out, "adapter_config.json");
    free(out);
    free(unwritable);
    free(empty);
    free(keep);
    qlt_remove_tree(tmp);
    free(tmp);
    free(src);
    free(adapter);
    free(llama_adapter);
    free(cfg);
    free(none_cfg);
    free(out_dir);
}

/* The merge of one weight: each element the double sum rounded once, whatever the thread count. */
Test(merge, weight_is_the_exact_sum_rounded_once) {
    enum { ROWS = 37, COLS = 53, R = 5 };
    float w[ROWS * COLS], a[R * COLS], b[ROWS * R], got[ROWS * COLS];
    uint16_t got16[ROWS * COLS];
    uint64_t s = 12345;
    for (int i = 0; i < ROWS * COLS; i++) w[i] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
    for (int i = 0; i < R * COLS; i++) a[i] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
    for (int i = 0; i < ROWS * R; i++) b[i] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
    double scale = 32.0 / 5.0;
    qlt_merge_weight(got, QLT_DTYPE_F32, w, a, b, ROWS, COLS, R, scale);
    qlt_merge_weight(got16, QLT_DTYPE_BF16, w, a, b, ROWS, COLS, R, scale);
    int wrong = 0, wrong16 = 0;
    for (int o = 0; o < ROWS; o++) {
        for (int i = 0; i < COLS; i++) {
            long double acc = 0;
            for (int k = 0; k < R; k++) acc += (long double)b[o * R + k] * a[k * COLS + i];
            double exact = (double)((long double)w[o * COLS + i] + (long double)scale * acc);
            wrong += got[o * COLS + i] != (float)exact;
            uint16_t want16;
            qlt_convert_from_f64(&want16, QLT_DTYPE_BF16, &exact, 1);
            wrong16 += got16[o * COLS + i] != want16;
        }
    }
    cr_expect_eq(wrong, 0, "%d merged values are not the sum rounded once", wrong);
    cr_expect_eq(wrong16, 0, "%d bf16 values are not the sum rounded once", wrong16);
}
