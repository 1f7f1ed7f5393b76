/* test_bad_input.c: corrupt or wrong inputs give one clear line naming the file and the problem, a
 * non-zero exit, and no crash (these run the AddressSanitizer build of the CLI in CI). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "formats/safetensors.h"
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
    /* the data file exists (inputs are checked before the model loads): the model's error is the one reported */
    char *data = qlt_path_join(model_dir, "none.jsonl");
    if (!qlt_file_exists(data)) test_write_text(data, "");
    free(data);
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

/* As expect_cli_error, after the progress lines a run prints before it fails (the model load): exit 1, the
 * error is one line and the last. */
static void expect_cli_error_after_progress(const char *args, const char *needle1, const char *needle2) {
    char *out;
    int status = test_run_cli(NULL, args, &out);
    cr_expect_eq(status, 1, "exit status %d: %s", status, out);
    char *error = strstr(out, "qlora-train: error: ");
    cr_assert(error, "no error line in: %s", out);
    cr_expect(strchr(error, '\n') == error + strlen(error) - 1, "one error line, last: %s", out);
    cr_expect(strstr(error, needle1), "'%s' missing in: %s", needle1, error);
    if (needle2) cr_expect(strstr(error, needle2), "'%s' missing in: %s", needle2, error);
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

/* Replaces the first `from` in the text file dir/name by `to`. */
static void edit_file(const char *dir, const char *name, const char *from, const char *to) {
    char *path = qlt_path_join(dir, name);
    char *text, *edited = NULL;
    cr_assert_eq(qlt_read_file(path, &text, NULL), 0);
    char *p = strstr(text, from);
    cr_assert(p, "'%s' not in %s", from, path);
    *p = '\0';
    if (asprintf(&edited, "%s%s%s", text, to, p + strlen(from)) < 0) abort();
    test_write_text(path, edited);
    free(edited);
    free(text);
    free(path);
}

/* Expects `qlora-train eval` on the model in dir (eval config + `extra` YAML) to fail with one line holding
 * both needles. */
static void expect_eval_error(const char *dir, const char *extra, const char *needle1, const char *needle2) {
    char *cfg = qlt_path_join(dir, "eval.yaml"), *args = NULL;
    write_eval_config(cfg, dir, extra);
    if (asprintf(&args, "eval --config %s", cfg) < 0) abort();
    expect_cli_error(args, needle1, needle2);
    free(args);
    free(cfg);
}

/* In a copy of a fixture, replaces `from` by `to` in config.json, then expects `qlora-train eval` to fail with
 * one line holding both needles. */
static void expect_config_edit_error(const char *model, const char *from, const char *to, const char *needle1,
                                     const char *needle2) {
    char *dir = copy_fixture(model);
    edit_file(dir, "config.json", from, to);
    expect_eval_error(dir, "", needle1, needle2);
    qlt_remove_tree(dir);
    free(dir);
}

Test(bad_input, cli_shape_mismatch) {
    expect_config_edit_error("tiny-qwen2", "\"intermediate_size\": 160", "\"intermediate_size\": 128",
                             "mlp.gate_proj.weight' has shape [160, 64]", "[128, 64]");
}

Test(bad_input, cli_unsupported_architecture) {
    expect_config_edit_error("tiny-qwen3", "Qwen3ForCausalLM", "GPT2LMHeadModel",
                             "'GPT2LMHeadModel' is not supported (", "supported: LlamaForCausalLM");
}

Test(bad_input, cli_phi3_rope_values) {
    expect_config_edit_error("tiny-phi3", "\"partial_rotary_factor\": 0.75", "\"partial_rotary_factor\": 0.7",
                             "config.json: partial_rotary_factor 0.7 gives 11 rotary dims", "must be even");
    expect_config_edit_error("tiny-phi3", "\"rope_type\": \"longrope\"", "\"rope_type\": \"dynamic\"",
                             "rope_type 'dynamic' is not supported", "longrope");
    expect_config_edit_error("tiny-phi3-short", "\"short_factor\": [\n      1.0,", "\"short_factor\": [",
                             "config.json: LongRoPE's 'short_factor' must be a list of 8 numbers", "rotary dims / 2");
    expect_config_edit_error("tiny-phi3-short", "\"long_factor\": [\n      1.0,", "\"long_factor\": [\n      -1.0,",
                             "LongRoPE's 'long_factor'[0] must be a positive number", "config.json");
}

Test(bad_input, cli_sliding_window_values) {
    expect_config_edit_error("tiny-mistral", "\"sliding_window\": 6", "\"sliding_window\": -6", "'sliding_window'",
                             "non-negative integer");
    expect_config_edit_error("tiny-mistral", "\"sliding_window\": 6", "\"sliding_window\": 0", "'sliding_window'",
                             "positive integer or null");
    /* Qwen2 with use_sliding_window: layer_types (transformers 5) must name each layer's kind */
    char *dir = copy_fixture("tiny-qwen2");
    edit_file(dir, "config.json", "\"use_sliding_window\": false", "\"use_sliding_window\": true");
    edit_file(dir, "config.json", "\"sliding_window\": null", "\"sliding_window\": 4");
    edit_file(dir, "config.json", "\"full_attention\",", "\"sliding\",");
    expect_eval_error(dir, "", "config.json: layer_types[0]", "\"sliding_attention\"");
    qlt_remove_tree(dir);
    free(dir);
}

Test(bad_input, cli_head_dim_too_large) {
    expect_config_edit_error("tiny-llama", "\"head_dim\": 16", "\"head_dim\": 1024", "head_dim must be",
                             "(got 1024)");
}

/* Values that load but made every loss NaN (a negative rms_norm_eps, rope_theta 0) or were ignored (a
 * hidden_act that is not a string) are refused, naming the key. */
Test(bad_input, cli_model_config_values_out_of_range) {
    expect_config_edit_error("tiny-llama", "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1",
                             "config.json: rms_norm_eps must be a number >= 0", "(got -1)");
    expect_config_edit_error("tiny-llama", "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 1e300",
                             "config.json: rms_norm_eps must be", "32-bit float");
    expect_config_edit_error("tiny-llama", "\"rope_theta\": 500000.0", "\"rope_theta\": 0",
                             "config.json: rope_theta must be a positive number", "(got 0)");
    expect_config_edit_error("tiny-llama", "\"hidden_act\": \"silu\"", "\"hidden_act\": 5",
                             "config.json: hidden_act must be a string", NULL);
}

/* A lora.init_from adapter whose lora_alpha no float holds (the loss was NaN), whose use_rslora is not a bool
 * (it was read as false), or whose adapter_config.json is a directory ("read error") gives one clear line. */
Test(bad_input, cli_adapter_config_bad_values) {
    char *dir = copy_fixture("tiny-llama"), *adapter = qlt_path_join(dir, "adapter-init"), *text = NULL;
    if (asprintf(&text, "lora:\n  init_from: %s\n", adapter) < 0) abort();
    edit_file(adapter, "adapter_config.json", "\"lora_alpha\": 8", "\"lora_alpha\": 1e300");
    expect_eval_error(dir, text, "adapter_config.json: 'lora_alpha' must be a positive number", NULL);
    edit_file(adapter, "adapter_config.json", "\"lora_alpha\": 1e300", "\"lora_alpha\": 8");
    edit_file(adapter, "adapter_config.json", "\"use_rslora\": false", "\"use_rslora\": \"yes\"");
    expect_eval_error(dir, text, "adapter_config.json: 'use_rslora' must be true or false", NULL);
    char *cfgjson = qlt_path_join(adapter, "adapter_config.json");
    cr_assert_eq(remove(cfgjson), 0);
    cr_assert_eq(qlt_mkdirs(cfgjson), 0);
    expect_eval_error(dir, text, "adapter_config.json: is a directory, expected a file", NULL);
    qlt_remove_tree(dir);
    free(cfgjson);
    free(text);
    free(adapter);
    free(dir);
}

/* A directory given as a data file (with and without the dataset cache, which hashes the file first) and
 * "random:" with no config.json after it: one line naming the path ("read error" and ": cannot open" before). */
Test(bad_input, cli_data_dir_and_empty_random_path) {
    char *dir = test_tmpdir(), *model = test_fixture_path("tiny-qwen2", NULL);
    char *tok = test_fixture_path("tok-qwen2style", "tokenizer.json");
    char *cfg = qlt_path_join(dir, "c.yaml"), *args = NULL;
    if (asprintf(&args, "train --config %s", cfg) < 0) abort();
    for (int cache = 0; cache < 2; cache++) {
        char *text = NULL;
        if (asprintf(&text, "model: {path: %s, quant: none}\ndata: {train: [%s], cache: %s, tokenizer: %s}\n"
                     "train: {device: cpu}\noutput: {dir: %s/run}\n", model, dir, cache ? "true" : "false", tok, dir) < 0)
            abort();
        test_write_text(cfg, text);
        expect_cli_error_after_progress(args, dir, "is a directory, expected a file");
        free(text);
    }
    test_write_text(cfg, "model: {path: \"random:\"}\ndata: {train: [x.jsonl]}\ntrain: {device: cpu}\n");
    expect_cli_error(args, "model.path 'random:' names no config.json", NULL);
    qlt_remove_tree(dir);
    free(args);
    free(cfg);
    free(tok);
    free(model);
    free(dir);
}

/* train.attention: cudnn asks for cuDNN's attention, which only the CUDA backend has: on the CPU one line says
 * so and names the key (and a value outside auto / own / cudnn is refused by the schema). */
Test(bad_input, cli_cudnn_attention_on_the_cpu) {
    char *dir = test_tmpdir(), *model = test_fixture_path("tiny-qwen2", NULL);
    char *cfg = qlt_path_join(dir, "c.yaml"), *args = NULL, *text = NULL;
    if (asprintf(&args, "train --config %s", cfg) < 0) abort();
    if (asprintf(&text, "model: {path: %s, quant: none}\ndata: {train: [x.jsonl]}\n"
                 "train: {device: cpu, attention: cudnn}\noutput: {dir: %s/run}\n", model, dir) < 0)
        abort();
    test_write_text(cfg, text);
    expect_cli_error(args, "train.attention: cudnn needs the CUDA backend", "train.attention: auto");
    test_write_text(cfg, "model: {path: x}\ntrain: {device: cpu, attention: flash}\n");
    expect_cli_error(args, "train.attention", "auto, own, cudnn");
    qlt_remove_tree(dir);
    free(text), free(args), free(cfg), free(model), free(dir);
}

/* With lora.init_from the adapter's r / alpha / targets / rslora win; a config that says otherwise is told
 * so in one notice line, and a matching one is not. */
Test(bad_input, cli_init_from_overrides_lora_shape_with_a_notice) {
    char *dir = copy_fixture("tiny-llama"), *cfg = qlt_path_join(dir, "eval.yaml"), *data = qlt_path_join(dir, "none.jsonl");
    test_write_text(data, "{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8]}\n");
    const char *notice = "lora.init_from: the adapter's own r 4, alpha 8";
    for (int matching = 0; matching < 2; matching++) {
        char *extra = NULL, *args = NULL, *out = NULL;
        if (asprintf(&extra, "lora:\n  init_from: %s/adapter-init\n  r: %d\n  alpha: 8\n", dir, matching ? 4 : 16) < 0)
            abort();
        write_eval_config(cfg, dir, extra);
        if (asprintf(&args, "eval --config %s", cfg) < 0) abort();
        cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
        if (matching) cr_expect(!strstr(out, notice), "no notice when the config agrees: %s", out);
        else cr_expect(strstr(out, notice) && strstr(out, "lora.r 16"), "%s", out);
        free(out);
        free(args);
        free(extra);
    }
    qlt_remove_tree(dir);
    free(data);
    free(cfg);
    free(dir);
}

/* Integer flags are checked (tokenize used atoi: "--threads abc" ran with 0 threads = all cores). */
Test(bad_input, cli_integer_flags_are_checked) {
    expect_cli_error("tokenize --tokenizer x.json --threads abc", "--threads: expected an integer in [0, 4096]", "'abc'");
    expect_cli_error("tokenize --tokenizer x.json --repeat 0", "--repeat: expected an integer in [1, 1000]", NULL);
    expect_cli_error("bench --model x.json --steps 2x", "--steps: expected an integer", "'2x'");
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

/* Runs `qlora-train train` on the model in model_dir (with the tok-qwen2style tokenizer) over data written as
 * `jsonl` in `format`; expects exit status 1 and, after the progress lines, one error line holding both
 * needles. */
static void expect_train_error_on(const char *model_dir, const char *format, const char *jsonl, const char *needle1,
                                  const char *needle2) {
    char *dir = test_tmpdir(), *tok = test_fixture_path("tok-qwen2style", "tokenizer.json");
    char *data = qlt_path_join(dir, "data.jsonl"), *cfg = qlt_path_join(dir, "c.yaml"), *text = NULL, *args = NULL;
    test_write_text(data, jsonl);
    if (asprintf(&text, "model: {path: %s, quant: none}\ndata: {train: [%s], format: %s, seq_len: 8, cache: false, "
                 "tokenizer: %s}\ntrain: {device: cpu, max_steps: 1}\noutput: {dir: %s/run}\n",
                 model_dir, data, format, tok, dir) < 0)
        abort();
    test_write_text(cfg, text);
    if (asprintf(&args, "train --config %s", cfg) < 0) abort();
    expect_cli_error_after_progress(args, needle1, needle2);
    qlt_remove_tree(dir);
    free(args);
    free(text);
    free(cfg);
    free(data);
    free(tok);
    free(dir);
}

/* expect_train_error_on the tiny-qwen2 fixture */
static void expect_train_data_error(const char *format, const char *jsonl, const char *needle1, const char *needle2) {
    char *model = test_fixture_path("tiny-qwen2", NULL);
    expect_train_error_on(model, format, jsonl, needle1, needle2);
    free(model);
}

/* Training data where no token has a label (labels all -100, or prompts that fill data.seq_len) trained
 * nothing at loss 0 and exit status 0; it is an error now. */
Test(bad_input, cli_train_data_without_labels) {
    expect_train_data_error("tokens", "{\"input_ids\": [1, 2, 3], \"labels\": [-100, -100, -100]}\n",
                            "data.train has no tokens with labels", NULL);
    expect_train_data_error("completion", "{\"prompt\": \"a,b,c,d,e,f,g,h,i,j\", \"completion\": \"q\"}\n",
                            "data.train has no tokens with labels", NULL);
}

/* A chat message that is not an object is named as such (the message was "messages[0] is not an object: "
 * followed by whatever error an earlier call had left). */
Test(bad_input, cli_chat_message_not_an_object) {
    expect_train_data_error("chat", "{\"messages\": [\"hi\"]}\n",
                            "data.jsonl:1: messages[0] is not a {\"role\", \"content\"} object (data.format: chat)", NULL);
}

/* A bitsandbytes module whose quant_state has three dims is reported with all three (the message said
 * "[96, 256]; config.json implies [96, 256]"). */
/* A checkpoint holding NaN / infinity (saved from a diverged run): `inspect --check` names each such tensor
 * and fails; training from it stops at step 1 saying the model, not the learning rate, is the cause (it used
 * to say "diverged: lower train.lr"). The intact fixture passes the check. */
Test(bad_input, cli_nonfinite_weights_named_by_inspect_check_and_at_step_1) {
    char *dir = copy_fixture("tiny-qwen2"), *args = NULL, *out = NULL;
    char *path = qlt_path_join(dir, "model.safetensors");
    qlt_st_file f;
    cr_assert_eq(qlt_st_open(&f, path), 0);
    qlt_st_writer w;
    qlt_st_writer_init(&w);
    float *edited[2] = {NULL, NULL};
    for (int i = 0; i < f.n_tensors; i++) {
        const qlt_st_tensor *t = &f.tensors[i];
        const int which = strcmp(t->name, "model.layers.1.mlp.up_proj.weight") == 0 ? 0
                          : strcmp(t->name, "model.norm.weight") == 0               ? 1
                                                                                     : -1;
        if (which < 0) {
            qlt_st_writer_add(&w, t->name, t->dtype, t->ndim, t->shape, t->data);
            continue;
        }
        cr_assert_eq(t->dtype, QLT_DTYPE_F32);
        edited[which] = malloc(t->nbytes);
        memcpy(edited[which], t->data, t->nbytes);
        if (which == 0) edited[0][5] = NAN, edited[0][9] = NAN;
        else edited[1][0] = -INFINITY;
        qlt_st_writer_add(&w, t->name, t->dtype, t->ndim, t->shape, edited[which]);
    }
    qlt_st_close(&f);
    cr_assert_eq(qlt_st_writer_write(&w, path), 0);
    qlt_st_writer_free(&w);
    free(edited[0]);
    free(edited[1]);

    if (asprintf(&args, "inspect %s --check", dir) < 0) abort();
    cr_expect_eq(test_run_cli(NULL, args, &out), 1, "%s", out);
    cr_expect(strstr(out, "check: model.layers.1.mlp.up_proj.weight: 2 NaN, 0 infinite (first at element 5 of"), "%s", out);
    cr_expect(strstr(out, "check: model.norm.weight: 0 NaN, 1 infinite (first at element 0 of"), "%s", out);
    cr_expect(strstr(out, "qlora-train: error: inspect --check: 2 of "), "%s", out);
    free(args);
    free(out);

    char *model = test_fixture_path("tiny-qwen2", NULL);
    if (asprintf(&args, "inspect %s --check", model) < 0) abort();
    cr_expect_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "check: every value of the "), "%s", out);
    free(args);
    free(out);

    expect_train_error_on(dir, "tokens", "{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8]}\n",
                          "step 1: the loss is nan before any update", "inspect MODEL_DIR --check");
    qlt_remove_tree(dir);
    free(model);
    free(path);
    free(dir);
}

Test(bad_input, cli_quantized_module_shape_names_every_dim) {
    char *dir = test_tmpdir(), *src = test_fixture_path("tiny-llama", NULL), *args = NULL, *out = NULL;
    char *q = qlt_path_join(dir, "q");
    if (asprintf(&args, "quantize %s %s", src, q) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    char *path = qlt_path_join(q, "model.safetensors");
    const char *state = "model.layers.0.mlp.down_proj.weight.quant_state.bitsandbytes__nf4";
    qlt_st_file f;
    cr_assert_eq(qlt_st_open(&f, path), 0, "%s", qlt_error());
    qlt_st_writer w;
    qlt_st_writer_init(&w);
    for (int i = 0; i < f.n_tensors; i++) {
        const qlt_st_tensor *t = &f.tensors[i];
        if (strcmp(t->name, state) != 0) {
            qlt_st_writer_add(&w, t->name, t->dtype, t->ndim, t->shape, t->data);
            continue;
        }
        char *json = strndup((const char *)t->data, t->nbytes), *shape = strstr(json, "\"shape\": [96, 256]");
        cr_assert(shape, "%s", json);
        char *edited = NULL;
        *shape = '\0';
        if (asprintf(&edited, "%s\"shape\": [96, 256, 1]%s", json, shape + strlen("\"shape\": [96, 256]")) < 0) abort();
        int64_t n = (int64_t)strlen(edited);
        qlt_st_writer_add(&w, t->name, QLT_DTYPE_U8, 1, &n, edited);
        free(edited);
        free(json);
    }
    qlt_st_close(&f);
    cr_assert_eq(qlt_st_writer_write(&w, path), 0, "%s", qlt_error());
    qlt_st_writer_free(&w);
    expect_eval_error(q, "", "'model.layers.0.mlp.down_proj' has shape [96, 256, 1]", "config.json implies [96, 256]");
    qlt_remove_tree(dir);
    free(path);
    free(q);
    free(out);
    free(args);
    free(src);
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
    cr_expect(strstr(out, "attention: full causal"), "%s", out);
    free(args);
    free(out);
    char *mistral = test_fixture_path("tiny-mistral", NULL);
    if (asprintf(&args, "inspect %s", mistral) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "architecture: MistralForCausalLM"), "%s", out);
    cr_expect(strstr(out, "attention: sliding window 6 on every layer"), "%s", out);
    free(mistral);
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

/* A run from step 0 into an output.dir holding an earlier run's checkpoints and final adapter refuses
 * before writing anything there (the earlier run's files keep their bytes); output.overwrite=true deletes
 * them first. */
static char *demo_run_args(const char *tmp, int steps, const char *overwrite) {
    char *args = NULL;
    if (asprintf(&args, "train --config %s/../../configs/demo.yaml --set train.device=cpu --set train.max_steps=%d "
                 "--set output.save_every=1 --set output.dir=%s/run --set data.cache=false --set output.overwrite=%s",
                 QLT_TEST_DATA, steps, tmp, overwrite) < 0)
        abort();
    return args;
}

static char *read_or_null(const char *dir, const char *file, size_t *len) {
    char *path = qlt_path_join(dir, file), *text = NULL;
    if (qlt_read_file(path, &text, len) != 0) text = NULL;
    free(path);
    return text;
}

Test(cli, fresh_run_keeps_an_earlier_run) {
    char *tmp = test_tmpdir(), *out = NULL, *args = demo_run_args(tmp, 2, "false");
    cr_assert_eq(test_run_cli(QLT_TEST_DATA "/../..", args, &out), 0, "%s", out);
    free(args);
    free(out);
    char *run = qlt_path_join(tmp, "run");
    const char *kept[] = {"checkpoint-2/trainer_state.json", "final/adapter_model.safetensors", "metrics.jsonl",
                          "run_config.json"};
    char *before[4];
    size_t len[4], after_len;
    for (int i = 0; i < 4; i++) cr_assert_not_null(before[i] = read_or_null(run, kept[i], &len[i]), "%s", kept[i]);
    args = demo_run_args(tmp, 1, "false");
    cr_expect_eq(test_run_cli(QLT_TEST_DATA "/../..", args, &out), 1, "%s", out);
    cr_expect(strstr(out, "holds an earlier run") && strstr(out, "--resume auto") && strstr(out, "output.overwrite"),
              "%s", out);
    for (int i = 0; i < 4; i++) {
        char *after = read_or_null(run, kept[i], &after_len);
        cr_expect(after && after_len == len[i] && memcmp(after, before[i], len[i]) == 0, "%s changed by the refused run",
                  kept[i]);
        free(after);
        free(before[i]);
    }
    free(args);
    free(out);
    args = demo_run_args(tmp, 1, "true");
    cr_assert_eq(test_run_cli(QLT_TEST_DATA "/../..", args, &out), 0, "%s", out);
    char *ck1 = qlt_path_join(run, "checkpoint-1"), *ck2 = qlt_path_join(run, "checkpoint-2");
    cr_expect(qlt_dir_exists(ck1) && !qlt_dir_exists(ck2), "overwrite: the earlier checkpoint-2 is gone: %s", out);
    free(ck1);
    free(ck2);
    free(args);
    free(out);
    free(run);
    qlt_remove_tree(tmp);
    free(tmp);
}
