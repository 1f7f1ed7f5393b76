/* test_bad_input.c: corrupt or wrong inputs give one clear line naming the file and the problem, a
 * non-zero exit, and no crash (these run the AddressSanitizer build of the CLI in CI). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "io/fileutil.h"
#include "io/safetensors.h"
#include "test_util.h"

/* Writes a safetensors file from a header text and `data_len` bytes of data (pattern filled). */
static void write_raw_safetensors(const char *path, const char *header, uint64_t header_len_field, size_t data_len) {
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(header_len_field >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i * 7 + 1), f);
    fclose(f);
}

static void expect_open_error(const char *header, uint64_t hlen, size_t data_len, const char *needle) {
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, "bad.safetensors");
    write_raw_safetensors(path, header, hlen, data_len);
    qlt_st_file f;
    int rc = qlt_st_open(&f, path);
    cr_expect_eq(rc, -1, "opening %s should fail", header);
    if (rc == 0) qlt_st_close(&f);
    cr_expect(strstr(qlt_error(), path) != NULL, "error names the file: %s", qlt_error());
    cr_expect(strstr(qlt_error(), needle) != NULL, "error mentions '%s': %s", needle, qlt_error());
    cr_expect(strchr(qlt_error(), '\n') == NULL, "one line");
    qlt_remove_tree(dir);
    free(path);
    free(dir);
}

#define HDR(s) s, (uint64_t)strlen(s)

Test(bad_input, safetensors_header_length_past_end) {
    expect_open_error("{}", 1u << 20, 0, "header length");
}

Test(bad_input, safetensors_header_not_json) {
    expect_open_error(HDR("this is not json"), 0, "not valid JSON");
}

Test(bad_input, safetensors_offsets_outside_data) {
    expect_open_error(HDR("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}"), 8, "outside the data area");
}

Test(bad_input, safetensors_overlapping_tensors) {
    expect_open_error(HDR("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                          "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}"),
                      24, "overlap");
}

Test(bad_input, safetensors_length_mismatch) {
    expect_open_error(HDR("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,16]}}"), 16, "need 12");
}

Test(bad_input, safetensors_unknown_dtype) {
    expect_open_error(HDR("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}"), 2, "unsupported dtype");
}

Test(bad_input, safetensors_duplicate_metadata) {
    expect_open_error(HDR("{\"__metadata__\":{\"format\":\"pt\"},\"__metadata__\":{\"format\":\"np\"}}"), 0,
                      "__metadata__ appears twice");
}

Test(bad_input, safetensors_truncated_file) {
    char *dir = test_tmpdir();
    char *src = test_fixture_path("tiny-qwen2", "model.safetensors");
    char *path = qlt_path_join(dir, "model.safetensors");
    char *data;
    size_t len;
    cr_assert_eq(qlt_read_file(src, &data, &len), 0);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len / 2, f); /* cut in the middle of the data area */
    fclose(f);
    qlt_st_file st;
    cr_expect_eq(qlt_st_open(&st, path), -1);
    cr_expect(strstr(qlt_error(), "outside the data area") && strstr(qlt_error(), path), "%s", qlt_error());
    f = fopen(path, "wb");
    fwrite(data, 1, 5, f); /* shorter than the length field */
    fclose(f);
    cr_expect_eq(qlt_st_open(&st, path), -1);
    cr_expect(strstr(qlt_error(), "too short"), "%s", qlt_error());
    free(data);
    qlt_remove_tree(dir);
    free(src);
    free(path);
    free(dir);
}

Test(bad_input, safetensors_roundtrip_writer) {
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, "w.safetensors");
    qlt_st_writer w;
    qlt_st_writer_init(&w);
    float a[6] = {1, -2, 3.5f, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0xc040};
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    qlt_st_writer_add(&w, "b", QLT_DTYPE_BF16, 1, sb, b);
    qlt_st_writer_add(&w, "a", QLT_DTYPE_F32, 2, sa, a);
    qlt_st_writer_set_metadata(&w, "{\"format\":\"pt\"}");
    cr_assert_eq(qlt_st_writer_write(&w, path), 0, "%s", qlt_error());
    qlt_st_writer_free(&w);
    qlt_st_file f;
    cr_assert_eq(qlt_st_open(&f, path), 0, "%s", qlt_error());
    const qlt_st_tensor *ta = qlt_st_find(&f, "a"), *tb = qlt_st_find(&f, "b");
    cr_assert(ta && tb);
    cr_assert_eq(ta->ndim, 2);
    cr_assert_eq(ta->shape[1], 3);
    cr_assert_eq(memcmp(ta->data, a, sizeof a), 0);
    float back[3];
    qlt_st_read_f32(tb, back);
    cr_assert_eq(back[2], -3.0f);
    cr_assert_str_eq(f.metadata_json, "{\"format\":\"pt\"}");
    qlt_st_close(&f);
    qlt_remove_tree(dir);
    free(path);
    free(dir);
}

/* A copy of a fixture model dir where `edit` rewrites config.json or the weights. */
static char *copy_fixture(const char *model) {
    char *dir = test_tmpdir();
    char *src = test_fixture_path(model, NULL);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -r %s/. %s/", src, dir);
    cr_assert_eq(system(cmd), 0);
    free(src);
    return dir;
}

static void write_eval_config(const char *path, const char *model_dir, const char *extra) {
    char *text = NULL;
    if (asprintf(&text, "model:\n  path: %s\n  quant: none\ntrain:\n  device: cpu\ndata:\n  eval: [%s/none.jsonl]\n  format: tokens\n%s", model_dir,
                 model_dir, extra) < 0)
        abort();
    test_write_text(path, text);
    free(text);
}

/* Runs the CLI; expects exit 1, exactly one output line containing each needle. */
static void expect_cli_error(const char *args, const char *needle1, const char *needle2) {
    char *out;
    int status = test_run_cli(NULL, args, &out);
    cr_expect_eq(status, 1, "exit status %d for `%s`: %s", status, args, out);
    cr_expect(strncmp(out, "qlora-train: error: ", 20) == 0, "output: %s", out);
    size_t lines = 0;
    for (char *p = out; *p; p++) lines += *p == '\n';
    cr_expect_eq(lines, 1, "one line, got: %s", out);
    cr_expect(strstr(out, needle1), "'%s' missing in: %s", needle1, out);
    if (needle2) cr_expect(strstr(out, needle2), "'%s' missing in: %s", needle2, out);
    free(out);
}

Test(bad_input, cli_missing_tensor) {
    char *dir = copy_fixture("tiny-llama");
    /* rewrite the model without one tensor */
    char *path = qlt_path_join(dir, "model.safetensors");
    qlt_st_file f;
    cr_assert_eq(qlt_st_open(&f, path), 0);
    qlt_st_writer w;
    qlt_st_writer_init(&w);
    for (int i = 0; i < f.n_tensors; i++)
        if (strcmp(f.tensors[i].name, "model.layers.1.mlp.up_proj.weight") != 0)
            qlt_st_writer_add(&w, f.tensors[i].name, f.tensors[i].dtype, f.tensors[i].ndim, f.tensors[i].shape,
                              f.tensors[i].data);
    qlt_st_close(&f);
    cr_assert_eq(qlt_st_writer_write(&w, path), 0);
    qlt_st_writer_free(&w);
    char *cfg = qlt_path_join(dir, "eval.yaml"), *args = NULL;
    write_eval_config(cfg, dir, "");
    if (asprintf(&args, "eval --config %s", cfg) < 0) abort();
    expect_cli_error(args, "model.layers.1.mlp.up_proj.weight", "missing");
    qlt_remove_tree(dir);
    free(args);
    free(cfg);
    free(path);
    free(dir);
}

/* In a copy of a fixture, replaces `from` by `to` in config.json, then expects `qlora-train eval` to fail with
 * one line holding both needles. */
static void expect_config_edit_error(const char *model, const char *from, const char *to, const char *needle1,
                                     const char *needle2) {
    char *dir = copy_fixture(model);
    char *cfgjson = qlt_path_join(dir, "config.json");
    char *text, *edited = NULL;
    cr_assert_eq(qlt_read_file(cfgjson, &text, NULL), 0);
    char *p = strstr(text, from);
    cr_assert(p, "'%s' not in %s", from, cfgjson);
    *p = '\0';
    if (asprintf(&edited, "%s%s%s", text, to, p + strlen(from)) < 0) abort();
    test_write_text(cfgjson, edited);
    char *cfg = qlt_path_join(dir, "eval.yaml"), *args = NULL;
    write_eval_config(cfg, dir, "");
    if (asprintf(&args, "eval --config %s", cfg) < 0) abort();
    expect_cli_error(args, needle1, needle2);
    qlt_remove_tree(dir);
    free(args);
    free(cfg);
    free(edited);
    free(text);
    free(cfgjson);
    free(dir);
}

Test(bad_input, cli_shape_mismatch) {
    expect_config_edit_error("tiny-qwen2", "\"intermediate_size\": 160", "\"intermediate_size\": 128",
                             "mlp.gate_proj.weight' has shape [160, 64]", "[128, 64]");
}

Test(bad_input, cli_unsupported_architecture) {
    expect_config_edit_error("tiny-qwen3", "Qwen3ForCausalLM", "Phi3ForCausalLM", "Phi3ForCausalLM",
                             "supported: LlamaForCausalLM");
}

Test(bad_input, cli_sliding_window_shorter_than_seq) {
    expect_config_edit_error("tiny-llama", "\"vocab_size\":", "\"sliding_window\": 4, \"vocab_size\":",
                             "sliding_window 4 is shorter than data.seq_len", "set data.seq_len <= 4");
}

Test(bad_input, cli_head_dim_too_large) {
    expect_config_edit_error("tiny-llama", "\"head_dim\": 16", "\"head_dim\": 1024", "head_dim must be",
                             "(got 1024)");
}

Test(bad_input, cli_config_key_misspelled) {
    char *dir = test_tmpdir();
    char *cfg = qlt_path_join(dir, "c.yaml"), *args = NULL;
    test_write_text(cfg, "model:\n  path: x\ntrain:\n  micro_bach: 2\n");
    if (asprintf(&args, "train --config %s", cfg) < 0) abort();
    expect_cli_error(args, "c.yaml:4", "did you mean 'train.micro_batch'");
    qlt_remove_tree(dir);
    free(args);
    free(cfg);
    free(dir);
}

Test(bad_input, cli_config_wrong_type) {
    char *dir = test_tmpdir();
    char *cfg = qlt_path_join(dir, "c.yaml"), *args = NULL;
    test_write_text(cfg, "model:\n  path: x\ntrain:\n  lr: fast\n");
    if (asprintf(&args, "train --config %s", cfg) < 0) abort();
    expect_cli_error(args, "c.yaml:4", "train.lr");
    free(args);
    if (asprintf(&args, "train --config %s --set train.micro_batch=two", cfg) < 0) abort();
    test_write_text(cfg, "model:\n  path: x\n");
    expect_cli_error(args, "train.micro_batch", "two");
    qlt_remove_tree(dir);
    free(args);
    free(cfg);
    free(dir);
}

/* `qlora-train eval` on each fixture (with the initial adapter) prints the golden first loss. */
Test(cli, eval_prints_golden_loss) {
    const char *models[3] = {"tiny-qwen2", "tiny-llama", "tiny-qwen3"};
    const double golden[3] = {6.249364376068115, 6.114551067352295, 6.29226016998291}; /* losses[0] */
    for (int i = 0; i < 3; i++) {
        char *dir = test_tmpdir();
        char *fixture = test_fixture_path(models[i], NULL);
        char *tokens = qlt_path_join(dir, "eval.jsonl");
        int seq;
        test_write_golden_tokens(models[i], tokens, NULL, &seq);
        char *cfg = qlt_path_join(dir, "eval.yaml"), *text = NULL, *args = NULL, *out = NULL;
        if (asprintf(&text,
                     "model: {path: %s, quant: none}\nlora: {init_from: %s/adapter-init}\n"
                     "data: {eval: [%s], format: tokens, seq_len: %d, packing: false, cache: false}\n"
                     "train: {device: cpu, micro_batch: 2}\noutput: {dir: %s/out}\n",
                     fixture, fixture, tokens, seq, dir) < 0)
            abort();
        test_write_text(cfg, text);
        if (asprintf(&args, "eval --config %s", cfg) < 0) abort();
        int status = test_run_cli(NULL, args, &out);
        cr_assert_eq(status, 0, "%s", out);
        char *k = strstr(out, "{\"loss\": ");
        cr_assert(k, "%s", out);
        double loss = strtod(k + 9, NULL);
        cr_expect(loss > 0 && (loss - golden[i]) / golden[i] < 1e-5 && (golden[i] - loss) / golden[i] < 1e-5,
                  "%s: eval loss %.9f vs golden %.9f", models[i], loss, golden[i]);
        qlt_remove_tree(dir);
        free(dir);
        free(fixture);
        free(tokens);
        free(cfg);
        free(text);
        free(args);
        free(out);
    }
}

/* `qlora-train inspect` reads headers only: architecture, counts, dtypes and the NF4 footprint. */
Test(cli, inspect_reports_model) {
    char *dir = test_fixture_path("tiny-llama", NULL), *args = NULL, *out = NULL;
    if (asprintf(&args, "inspect %s", dir) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "architecture: LlamaForCausalLM  layers 3  hidden 96  heads 6 / kv 2  head_dim 16"), "%s", out);
    cr_expect(strstr(out, "model.layers.2.mlp.down_proj.weight"), "%s", out);
    cr_expect(strstr(out, "F32"), "%s", out);
    cr_expect(strstr(out, "NF4 (block 64) whole model"), "%s", out);
    free(args);
    free(out);
    if (asprintf(&args, "inspect %s/adapter-init", dir) < 0) abort();
    cr_expect_eq(test_run_cli(NULL, args, &out), 1, "a directory without config.json is an error: %s", out);
    cr_expect(strstr(out, "config.json"), "%s", out);
    free(args);
    free(out);
    free(dir);
}

/* The README's demo (configs/demo.yaml: random-weight tiny Llama, NF4, real text through the tokenizer)
 * trains and writes a PEFT adapter; two steps on the CPU here. */
Test(cli, demo_config_trains) {
    char *tmp = test_tmpdir(), *args = NULL, *out = NULL;
    if (asprintf(&args, "train --config %s/../../configs/demo.yaml --set train.device=cpu --set train.max_steps=2 "
                 "--set output.save_every=0 --set output.dir=%s/run --set data.cache=false",
                 QLT_TEST_DATA, tmp) < 0)
        abort();
    /* the demo's paths are relative to the repository root */
    cr_assert_eq(test_run_cli(QLT_TEST_DATA "/../..", args, &out), 0, "%s", out);
    char *adapter = NULL;
    if (asprintf(&adapter, "%s/run/final/adapter_config.json", tmp) < 0) abort();
    cr_expect(qlt_file_exists(adapter), "no %s: %s", adapter, out);
    cr_expect(strstr(out, "step 2/2"), "%s", out);
    qlt_remove_tree(tmp);
    free(adapter);
    free(args);
    free(out);
    free(tmp);
}
