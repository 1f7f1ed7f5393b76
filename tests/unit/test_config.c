/* test_config.c: the run configuration: defaults, YAML and JSON files, --set overrides, every error
 * class (with the exact line a user would read), validation, the JSON round trip, and that the help and
 * docs/CONFIG.md list every key. Files are written under a fresh mkdtemp directory per test. */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/edit_distance.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "config/config.h"
#include "test_util.h"

static char *tmpdir; /* a fresh test_tmpdir() per test */

static void make_tmpdir(void) { tmpdir = test_tmpdir(); }

static void remove_tmpdir(void) {
    qlt_remove_tree(tmpdir);
    free(tmpdir);
}

TestSuite(config, .init = make_tmpdir, .fini = remove_tmpdir);

/* Writes `len` bytes to <tmpdir>/<name> and returns the path (in `path`). */
static const char *write_bytes(char *path, size_t size, const char *name, const char *bytes, size_t len) {
    snprintf(path, size, "%s/%s", tmpdir, name);
    test_write_bytes(path, bytes, len);
    return path;
}

static const char *write_file(char *path, size_t size, const char *name, const char *text) {
    return write_bytes(path, size, name, text, strlen(text));
}

/* Loads `text` as file `name` over the defaults; expects failure and the exact message
 * "<path>:<rest>" (rest begins with the line number or ':'). */
static void expect_load_error(const char *name, const char *text, const char *rest) {
    char path[512], expected[1024];
    write_file(path, sizeof path, name, text);
    qlt_config cfg;
    qlt_config_defaults(&cfg);
    cr_assert_eq(qlt_config_load_file(&cfg, path), -1, "loading %s should fail", name);
    snprintf(expected, sizeof expected, "%s%s", path, rest);
    cr_assert_str_eq(qlt_error(), expected);
    qlt_config_free(&cfg);
}

static void expect_set_error(const char *assignment, const char *message) {
    qlt_config cfg;
    qlt_config_defaults(&cfg);
    cr_assert_eq(qlt_config_set(&cfg, assignment), -1, "--set %s should fail", assignment);
    cr_assert_str_eq(qlt_error(), message);
    qlt_config_free(&cfg);
}

Test(config, defaults) {
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_str_eq(c.model.path, "");
    cr_assert_eq(c.model.quant, QLT_QUANT_NF4);
    cr_assert_eq(c.model.nf4_blocksize, 64);
    cr_assert_eq(c.model.double_quant, 1);
    cr_assert_eq(c.lora.r, 16);
    cr_assert_eq(c.lora.alpha, 32.0f);
    cr_assert_eq(c.lora.targets, (unsigned)QLT_TARGET_ALL);
    cr_assert_eq(c.lora.dropout, 0.0f);
    cr_assert_eq(c.lora.rslora, 0);
    cr_assert_str_eq(c.lora.init_from, "");
    cr_assert_eq(c.data.train.count, 0);
    cr_assert_eq(c.data.eval.count, 0);
    cr_assert_eq(c.data.format, QLT_DATA_FORMAT_TEXT);
    cr_assert_eq(c.data.seq_len, 2048);
    cr_assert_eq(c.data.packing, 1);
    cr_assert_eq(c.data.shuffle, 1);
    cr_assert_str_eq(c.data.tokenizer, "");
    cr_assert_eq(c.data.chat_template, QLT_CHAT_TEMPLATE_AUTO);
    cr_assert_eq(c.data.train_on_prompt, 0);
    cr_assert_eq(c.data.eval_split, 0.0f);
    cr_assert_eq(c.data.skip_bad, 0);
    cr_assert_eq(c.data.cache, 1);
    cr_assert_eq(c.data.threads, 0);
    cr_assert_eq(c.train.device, QLT_DEVICE_AUTO);
    cr_assert_eq(c.train.seed, 42u);
    cr_assert_eq(c.train.micro_batch, 1);
    cr_assert_eq(c.train.grad_accum, 1);
    cr_assert_eq(c.train.max_steps, 0);
    cr_assert_eq(c.train.epochs, 1.0f);
    cr_assert_eq(c.train.lr, 2e-4f);
    cr_assert_eq(c.train.betas[0], 0.9f);
    cr_assert_eq(c.train.betas[1], 0.999f);
    cr_assert_eq(c.train.eps, 1e-8f);
    cr_assert_eq(c.train.weight_decay, 0.0f);
    cr_assert_eq(c.train.max_grad_norm, 1.0f);
    cr_assert_eq(c.train.schedule, QLT_LR_SCHEDULE_CONSTANT);
    cr_assert_eq(c.train.warmup_steps, 0);
    cr_assert_eq(c.train.warmup_ratio, 0.0f);
    cr_assert_eq(c.train.min_lr_ratio, 0.0f);
    cr_assert_eq(c.train.backward_a, QLT_BACKWARD_PRECISION_BF16);
    cr_assert_eq(c.train.grad_checkpoint, QLT_GRAD_CHECKPOINT_NONE);
    cr_assert_eq(c.train.attention, QLT_ATTENTION_IMPL_AUTO);
    cr_assert_eq(c.train.cuda_graph, 0);
    cr_assert_eq(c.train.eval_every, 0);
    cr_assert_eq(c.train.log_every, 1);
    cr_assert_eq(c.train.threads, 0);
    cr_assert_str_eq(c.output.dir, "runs/demo");
    cr_assert_eq(c.output.save_every, 0);
    cr_assert_eq(c.output.keep_last, 0);
    cr_assert_eq(qlt_config_validate(&c), 0, "%s", qlt_error());
    qlt_config_free(&c);
    cr_assert_null(c.model.path);
    qlt_config_free(&c); /* a second free is harmless */
}

static const char full_yaml[] = "# every section, most keys changed\n"
                                "model:\n"
                                "  path: /models/tiny\n"
                                "  quant: none\n"
                                "  nf4_blocksize: 128\n"
                                "  double_quant: no\n"
                                "lora:\n"
                                "  r: 8\n"
                                "  alpha: 16.5\n"
                                "  targets: [q_proj, v, down]\n"
                                "  dropout: .05\n"
                                "  rslora: on\n"
                                "  init_from: 'adapters/start'\n"
                                "data:\n"
                                "  train:\n"
                                "    - a.jsonl\n"
                                "    - \"b c.jsonl.gz\"\n"
                                "  eval: e.jsonl\n"
                                "  format: chat\n"
                                "  seq_len: 512\n"
                                "  packing: false\n"
                                "  shuffle: 0\n"
                                "  tokenizer: tok/tokenizer.json\n"
                                "  chat_template: llama3\n"
                                "  train_on_prompt: true\n"
                                "  skip_bad: yes\n"
                                "  cache: off\n"
                                "  threads: 3\n"
                                "train:\n"
                                "  device: cpu\n"
                                "  seed: 18446744073709551615\n"
                                "  micro_batch: 4\n"
                                "  grad_accum: 2\n"
                                "  max_steps: 100\n"
                                "  epochs: 2.5\n"
                                "  lr: 2e-5\n"
                                "  betas: [0.8, 0.95]\n"
                                "  eps: 1e-6\n"
                                "  weight_decay: 0.01\n"
                                "  max_grad_norm: 0\n"
                                "  schedule: Cosine\n"
                                "  warmup_steps: 10\n"
                                "  min_lr_ratio: 0.1\n"
                                "  backward_a: fp16\n"
                                "  grad_checkpoint: layer\n"
                                "  cuda_graph: yes\n"
                                "  eval_every: 25\n"
                                "  log_every: 5\n"
                                "  threads: 2\n"
                                "output:\n"
                                "  dir: runs/x\n"
                                "  save_every: 50\n"
                                "  keep_last: 3\n";

/* What full_yaml says, checked field by field. */
static void check_full(const qlt_config *c) {
    cr_assert_str_eq(c->model.path, "/models/tiny");
    cr_assert_eq(c->model.quant, QLT_QUANT_NONE);
    cr_assert_eq(c->model.nf4_blocksize, 128);
    cr_assert_eq(c->model.double_quant, 0);
    cr_assert_eq(c->lora.r, 8);
    cr_assert_eq(c->lora.alpha, 16.5f);
    cr_assert_eq(c->lora.targets, (unsigned)(QLT_TARGET_Q | QLT_TARGET_V | QLT_TARGET_DOWN));
    cr_assert_eq(c->lora.dropout, 0.05f);
    cr_assert_eq(c->lora.rslora, 1);
    cr_assert_str_eq(c->lora.init_from, "adapters/start");
    cr_assert_eq(c->data.train.count, 2);
    cr_assert_str_eq(c->data.train.items[0], "a.jsonl");
    cr_assert_str_eq(c->data.train.items[1], "b c.jsonl.gz");
    cr_assert_eq(c->data.eval.count, 1);
    cr_assert_str_eq(c->data.eval.items[0], "e.jsonl");
    cr_assert_eq(c->data.format, QLT_DATA_FORMAT_CHAT);
    cr_assert_eq(c->data.seq_len, 512);
    cr_assert_eq(c->data.packing, 0);
    cr_assert_eq(c->data.shuffle, 0);
    cr_assert_str_eq(c->data.tokenizer, "tok/tokenizer.json");
    cr_assert_eq(c->data.chat_template, QLT_CHAT_TEMPLATE_LLAMA3);
    cr_assert_eq(c->data.train_on_prompt, 1);
    cr_assert_eq(c->data.skip_bad, 1);
    cr_assert_eq(c->data.cache, 0);
    cr_assert_eq(c->data.threads, 3);
    cr_assert_eq(c->train.device, QLT_DEVICE_CPU);
    cr_assert_eq(c->train.seed, UINT64_MAX);
    cr_assert_eq(c->train.micro_batch, 4);
    cr_assert_eq(c->train.grad_accum, 2);
    cr_assert_eq(c->train.max_steps, 100);
    cr_assert_eq(c->train.epochs, 2.5f);
    cr_assert_eq(c->train.lr, 2e-5f);
    cr_assert_eq(c->train.betas[0], 0.8f);
    cr_assert_eq(c->train.betas[1], 0.95f);
    cr_assert_eq(c->train.eps, 1e-6f);
    cr_assert_eq(c->train.weight_decay, 0.01f);
    cr_assert_eq(c->train.max_grad_norm, 0.0f);
    cr_assert_eq(c->train.schedule, QLT_LR_SCHEDULE_COSINE); /* "Cosine": enum text is matched in any case */
    cr_assert_eq(c->train.warmup_steps, 10);
    cr_assert_eq(c->train.min_lr_ratio, 0.1f);
    cr_assert_eq(c->train.backward_a, QLT_BACKWARD_PRECISION_FP16);
    cr_assert_eq(c->train.grad_checkpoint, QLT_GRAD_CHECKPOINT_LAYER);
    cr_assert_eq(c->train.cuda_graph, 1);
    cr_assert_eq(c->train.eval_every, 25);
    cr_assert_eq(c->train.log_every, 5);
    cr_assert_str_eq(c->output.dir, "runs/x");
    cr_assert_eq(c->output.save_every, 50);
    cr_assert_eq(c->train.threads, 2);
    cr_assert_eq(c->output.keep_last, 3);
}

Test(config, yaml_load) {
    char path[512];
    write_file(path, sizeof path, "full.yaml", full_yaml);
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    check_full(&c);
    cr_assert_eq(c.train.warmup_ratio, 0.0f); /* untouched keys keep their defaults */
    cr_assert_eq(qlt_config_validate(&c), 0, "%s", qlt_error());
    qlt_config_free(&c);
}

Test(config, yml_extension_empty_file_and_empty_section) {
    char path[512];
    qlt_config c, d;
    qlt_config_defaults(&c);
    qlt_config_defaults(&d);
    write_file(path, sizeof path, "empty.yml", "# nothing here\n");
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    write_file(path, sizeof path, "sections.YAML", "train:\nlora: ~\n");
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    cr_assert_null(qlt_config_first_difference(&c, &d));
    qlt_config_free(&c);
    qlt_config_free(&d);
}

Test(config, yaml_anchor_and_alias) {
    char path[512];
    write_file(path, sizeof path, "alias.yaml",
               "data:\n  train: &files [a.jsonl, b.jsonl]\n  eval: *files\n");
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    cr_assert_eq(c.data.eval.count, 2);
    cr_assert_str_eq(c.data.eval.items[1], "b.jsonl");
    qlt_config_free(&c);
}

Test(config, json_load) {
    char path[512];
    write_file(path, sizeof path, "c.json",
               "{\n"
               "  \"model\": {\"path\": \"/m\", \"quant\": \"nf4\", \"double_quant\": false},\n"
               "  \"lora\": {\"r\": 4, \"alpha\": 8, \"targets\": [\"q_proj\", \"k_proj\"], \"dropout\": 0.1},\n"
               "  \"data\": {\"train\": [\"x.jsonl\"], \"eval\": \"y.jsonl\", \"seq_len\": 64, \"packing\": true,\n"
               "           \"tokenizer\": null},\n"
               "  \"train\": {\"seed\": 12345678901234567890, \"lr\": 0.001, \"betas\": [0.5, 0.9],\n"
               "            \"max_steps\": 9000000000, \"schedule\": \"linear\", \"cuda_graph\": true},\n"
               "  \"output\": {\"dir\": \"runs/\\u00e9t\\u00e9\", \"keep_last\": 2}\n"
               "}\n");
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    cr_assert_str_eq(c.model.path, "/m");
    cr_assert_eq(c.model.double_quant, 0);
    cr_assert_eq(c.lora.r, 4);
    cr_assert_eq(c.lora.alpha, 8.0f);
    cr_assert_eq(c.lora.targets, (unsigned)(QLT_TARGET_Q | QLT_TARGET_K));
    cr_assert_eq(c.lora.dropout, 0.1f);
    cr_assert_eq(c.data.train.count, 1);
    cr_assert_str_eq(c.data.train.items[0], "x.jsonl");
    cr_assert_eq(c.data.eval.count, 1);
    cr_assert_eq(c.data.seq_len, 64);
    cr_assert_str_eq(c.data.tokenizer, "");
    cr_assert_eq(c.train.seed, 12345678901234567890ull); /* every digit, not a double's 53 bits */
    cr_assert_eq(c.train.lr, 0.001f);
    cr_assert_eq(c.train.betas[0], 0.5f);
    cr_assert_eq(c.train.max_steps, 9000000000ll);
    cr_assert_eq(c.train.schedule, QLT_LR_SCHEDULE_LINEAR);
    cr_assert_eq(c.train.cuda_graph, 1);
    cr_assert_str_eq(c.output.dir, "runs/\xc3\xa9t\xc3\xa9");
    cr_assert_eq(c.output.keep_last, 2);
    qlt_config_free(&c);
}

/* cJSON skips a UTF-8 byte order mark and every control byte as whitespace; the line scanner must agree with
 * it (it used to abort on an internal assertion for a file saved with a BOM, and misread values after a \f). */
Test(config, json_with_bom_and_control_whitespace) {
    char path[512];
    write_file(path, sizeof path, "bom.json", "\xef\xbb\xbf{\"train\": {\"lr\": 0.001},\n \"lora\": {\"r\": 4}}\n");
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    cr_assert_eq(c.train.lr, 0.001f);
    cr_assert_eq(c.lora.r, 4);
    write_file(path, sizeof path, "ff.json", "{\"train\":\f{\"lr\":\v0.002\f},\n\"lora\": {\"r\": 8}}\n");
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    cr_assert_eq(c.train.lr, 0.002f);
    cr_assert_eq(c.lora.r, 8);
    qlt_config_free(&c);
    expect_load_error("bomline.json", "\xef\xbb\xbf{\n  \"train\": {\n    \"lr\": \"fast\"}}\n",
                      ":3: train.lr: expected a number, got 'fast'");
}

/* A \u0000 in a JSON string used to cut the value silently ("cpu\u0000x" read as cpu); an escaped backslash
 * before u0000 is two ordinary characters. */
Test(config, json_nul_escape_is_refused) {
    expect_load_error("nul.json", "{\n \"train\": {\"device\": \"cpu\\u0000x\"}}\n",
                      ":2: a string holds \\u0000 (a NUL character), which no key takes: remove it");
    char path[512];
    write_file(path, sizeof path, "bs.json", "{\"output\": {\"dir\": \"runs/a\\\\u0000\"}}\n");
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    cr_assert_str_eq(c.output.dir, "runs/a\\u0000");
    qlt_config_free(&c);
}

/* ---- errors in files -------------------------------------------------------------------------------- */

Test(config, unknown_key_suggests_nearest) {
    expect_load_error("x.yaml",
                      "model:\n  path: m\nlora:\n  r: 8\ntrain:\n  micro_batch: 2\n  learning_rate: 1e-4\n",
                      ":7: unknown key 'train.learning_rate' (did you mean 'train.lr'?)");
    expect_load_error("typo.yaml", "lora:\n  dropuot: 0.1\n",
                      ":2: unknown key 'lora.dropuot' (did you mean 'lora.dropout'?)");
    /* the right key in the wrong section */
    expect_load_error("moved.yaml", "lora:\n  seq_len: 512\n",
                      ":2: unknown key 'lora.seq_len' (did you mean 'data.seq_len'?)");
    expect_load_error("hf.yaml", "train:\n  gradient_accumulation_steps: 4\n",
                      ":2: unknown key 'train.gradient_accumulation_steps' (did you mean 'train.grad_accum'?)");
}

Test(config, unknown_key_lists_section_keys_when_nothing_is_close) {
    expect_load_error("far.yaml", "output:\n  zzzzzzzzzz: 1\n",
                      ":2: unknown key 'output.zzzzzzzzzz' (valid keys in output: dir, save_every, keep_last, save_best, overwrite, sample_prompt, sample_tokens, tensorboard)");
}

Test(config, unknown_section) {
    expect_load_error("s.yaml", "trian:\n  lr: 1\n", ":1: unknown section 'trian' (did you mean 'train'?)");
    expect_load_error("top.yaml", "model:\n  path: m\nlr: 1e-4\n",
                      ":3: unknown section 'lr' (did you mean 'train.lr'? put it under 'train:')");
    expect_load_error("none.yaml", "zzzzzzzz: 1\n",
                      ":1: unknown section 'zzzzzzzz' (valid sections: model, lora, data, train, output)");
}

Test(config, json_errors_name_the_line) {
    expect_load_error("k.json", "{\n  \"train\": {\n    \"lr\": 1e-3,\n    \"learning_rate\": 5\n  }\n}\n",
                      ":4: unknown key 'train.learning_rate' (did you mean 'train.lr'?)");
    expect_load_error("t.json", "{\"train\": {\"lr\": 1e-3},\n \"data\": {\n  \"seq_len\":\n     \"long\"}}\n",
                      ":4: data.seq_len: expected an integer, got 'long'");
    expect_load_error("syntax.json", "{\n  \"train\": {\n    \"lr\": 1e-3,\n  }\n}\n",
                      ":4: JSON syntax error near '}'");
    expect_load_error("short.json", "{\n  \"train\": {\n",
                      ":3: JSON syntax error: the text ends too early (a missing '}' or ']'?)");
    expect_load_error("list.json", "[1, 2]",
                      ":1: the top level must be a mapping of sections (model, lora, data, train, output), got a list");
}

Test(config, wrong_types) {
    /* Each case is one line appended as line 9 of the same file. */
    static const struct {
        const char *line, *error;
    } cases[] = {
        {"  micro_batch: four\n", ":9: train.micro_batch: expected an integer, got 'four'"},
        {"  micro_batch: 4.5\n", ":9: train.micro_batch: expected an integer, got '4.5'"},
        {"  micro_batch: 99999999999\n",
         ":9: train.micro_batch: out of range (-2147483648 to 2147483647), got '99999999999'"},
        {"  max_steps: 9223372036854775808\n",
         ":9: train.max_steps: out of range (-9223372036854775808 to 9223372036854775807), got '9223372036854775808'"},
        {"  seed: -1\n", ":9: train.seed: out of range (0 to 18446744073709551615), got '-1'"},
        {"  cuda_graph: maybe\n",
         ":9: train.cuda_graph: expected true or false (or yes/no, on/off, 1/0), got 'maybe'"},
        {"  eps: tiny\n", ":9: train.eps: expected a number, got 'tiny'"},
        {"  eps: .inf\n", ":9: train.eps: expected a number, got '.inf'"},
        {"  max_grad_norm: 1e40\n", ":9: train.max_grad_norm: out of range for a 32-bit float, got '1e40'"},
        {"  schedule: cosine_with_restarts\n",
         ":9: train.schedule: expected one of constant, linear, cosine, got 'cosine_with_restarts'"},
        {"  micro_batch: 0\n", ":9: train.micro_batch: must be >= 1, got '0'"},
        {"  betas: [0.9, 1.5]\n", ":9: train.betas: must be in [0, 1), got '1.5'"},
        {"  betas: 0.9\n", ":9: train.betas: expected two numbers like [0.9, 0.999], got '0.9'"},
        {"  epochs: [1, 2]\n", ":9: train.epochs: expected a number, got a list"},
        {"  micro_batch:\n", ":9: train.micro_batch: expected an integer, got an empty value"},
    };
    const char *head = "model:\n  path: m\nlora:\n  r: 8\ndata:\n  seq_len: 64\ntrain:\n  lr: 1e-4\n";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024], name[32];
        snprintf(text, sizeof text, "%s%s", head, cases[i].line);
        snprintf(name, sizeof name, "case%zu.yaml", i);
        expect_load_error(name, text, cases[i].error);
    }
    expect_load_error("p.yaml", "lora:\n  targets:\n    - q\n    - qq_proj\n",
                      ":4: lora.targets: expected q, k, v, o, gate, up, down, q_proj ... down_proj or all-linear, "
                      "got 'qq_proj'");
    expect_load_error("q.yaml", "lora:\n  targets: []\n",
                      ":2: lora.targets: name at least one projection (e.g. [q, v] or all-linear)");
    expect_load_error("r.yaml", "model:\n  path: [a, b]\n", ":2: model.path: expected a string, got a list");
    expect_load_error("s.yaml", "data:\n  train: [a.jsonl, {x: 1}]\n",
                      ":2: data.train: expected a path (a non-empty string), got a mapping");
}

Test(config, accepted_spellings) {
    char path[512];
    write_file(path, sizeof path, "ok.yaml",
               "train:\n  lr: .5\n  epochs: -3\n  warmup_ratio: 1.0\n  cuda_graph: ON\nlora:\n  targets: all-linear\n"
               "  alpha: +2\ndata:\n  packing: 0\n  shuffle: No\n");
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, path), -1, "epochs -3 is out of range");
    cr_assert_str_eq(qlt_error() + strlen(path), ":3: train.epochs: must be >= 0, got '-3'");
    write_file(path, sizeof path, "ok2.yaml",
               "train:\n  lr: .5\n  epochs: 3\n  warmup_ratio: 1.0\n  cuda_graph: ON\nlora:\n  targets: all-linear\n"
               "  alpha: +2\ndata:\n  packing: 0\n  shuffle: No\n");
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    cr_assert_eq(c.train.lr, 0.5f);
    cr_assert_eq(c.train.warmup_ratio, 1.0f);
    cr_assert_eq(c.train.cuda_graph, 1);
    cr_assert_eq(c.lora.targets, (unsigned)QLT_TARGET_ALL);
    cr_assert_eq(c.lora.alpha, 2.0f);
    cr_assert_eq(c.data.packing, 0);
    cr_assert_eq(c.data.shuffle, 0);
    qlt_config_free(&c);
}

Test(config, file_and_structure_errors) {
    char missing[512], expected[1024];
    snprintf(missing, sizeof missing, "%s/missing.yaml", tmpdir);
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, missing), -1);
    snprintf(expected, sizeof expected, "%s: cannot read the config file: No such file or directory (check the path)",
             missing);
    cr_assert_str_eq(qlt_error(), expected);
    qlt_config_free(&c);

    expect_load_error("c.toml", "x = 1\n", ": unknown config format; name the file *.yaml, *.yml or *.json");
    expect_load_error("syn.yaml", "model:\n  path: x\n  quant: nf4: x\n",
                      ":3: YAML syntax error: mapping values are not allowed in this context");
    expect_load_error("flow.yaml", "train:\n  betas: [0.9, 0.99\n  lr: 1\n",
                      ":3: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence at "
                      "line 2)");
    expect_load_error("tab.yaml", "train:\n\tlr: 1\n",
                      ":2: YAML syntax error: found character that cannot start any token (while scanning for the "
                      "next token at line 2); YAML indents with spaces, not tabs");
    expect_load_error("two.yaml", "train:\n  lr: 1e-4\n---\ntrain:\n  lr: 1e-3\n",
                      ":4: a second YAML document starts here; keep one document per config file");
    expect_load_error("list.yaml", "- model\n- train\n",
                      ":1: the top level must be a mapping of sections (model, lora, data, train, output), got a list");
    expect_load_error("scalar.yaml", "hello\n",
                      ":1: the top level must be a mapping of sections (model, lora, data, train, output), "
                      "got 'hello'");
    expect_load_error("sec.yaml", "model:\n  path: m\ntrain: fast\n",
                      ":3: section 'train' must be a mapping of key: value lines, got 'fast'");
    expect_load_error("seclist.yaml", "train:\n  - lr\n",
                      ":2: section 'train' must be a mapping of key: value lines, got a list");
    expect_load_error("dup.yaml", "train:\n  lr: 1e-4\n  seed: 1\n  lr: 1e-3\n",
                      ":4: duplicate key 'train.lr' (first set at line 2); keep one");
    expect_load_error("dupsec.yaml", "train:\n  lr: 1e-4\ntrain:\n  seed: 1\n",
                      ":3: duplicate section 'train' (first at line 1); merge them into one");

    static const char with_nul[] = "train:\n  lr: 1\0\n";
    char path[512];
    write_bytes(path, sizeof path, "nul.yaml", with_nul, sizeof with_nul - 1);
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, path), -1);
    snprintf(expected, sizeof expected, "%s:2: the config file holds a NUL byte; save it as plain UTF-8 text", path);
    cr_assert_str_eq(qlt_error(), expected);
    qlt_config_free(&c);
}

Test(config, failed_load_changes_nothing) {
    char path[512];
    write_file(path, sizeof path, "half.yaml", "train:\n  lr: 0.5\n  seed: 7\n  micro_batch: many\n");
    qlt_config c, d;
    qlt_config_defaults(&c);
    qlt_config_defaults(&d);
    cr_assert_eq(qlt_config_load_file(&c, path), -1);
    cr_assert_null(qlt_config_first_difference(&c, &d), "a failed load changed %s",
                   qlt_config_first_difference(&c, &d));
    cr_assert_eq(qlt_config_set(&c, "data.train=[a, '']"), -1);
    cr_assert_null(qlt_config_first_difference(&c, &d));
    qlt_config_free(&c);
    qlt_config_free(&d);
}

/* ---- --set ----------------------------------------------------------------------------------------- */

Test(config, set_overrides) {
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_set(&c, "train.lr=1e-3"), 0, "%s", qlt_error());
    cr_assert_eq(c.train.lr, 1e-3f);
    cr_assert_eq(qlt_config_set(&c, " train.micro_batch = 8 "), 0, "%s", qlt_error());
    cr_assert_eq(c.train.micro_batch, 8);
    cr_assert_eq(qlt_config_set(&c, "lora.targets=[q,v]"), 0, "%s", qlt_error());
    cr_assert_eq(c.lora.targets, (unsigned)(QLT_TARGET_Q | QLT_TARGET_V));
    cr_assert_eq(qlt_config_set(&c, "lora.targets=k,o"), 0, "%s", qlt_error());
    cr_assert_eq(c.lora.targets, (unsigned)(QLT_TARGET_K | QLT_TARGET_O));
    cr_assert_eq(qlt_config_set(&c, "lora.targets=[gate_proj, up_proj]"), 0, "%s", qlt_error());
    cr_assert_eq(c.lora.targets, (unsigned)(QLT_TARGET_GATE | QLT_TARGET_UP));
    cr_assert_eq(qlt_config_set(&c, "lora.targets=all-linear"), 0, "%s", qlt_error());
    cr_assert_eq(c.lora.targets, (unsigned)QLT_TARGET_ALL);
    cr_assert_eq(qlt_config_set(&c, "data.packing=off"), 0, "%s", qlt_error());
    cr_assert_eq(c.data.packing, 0);
    cr_assert_eq(qlt_config_set(&c, "data.packing=Yes"), 0, "%s", qlt_error());
    cr_assert_eq(c.data.packing, 1);
    cr_assert_eq(qlt_config_set(&c, "train.cuda_graph=1"), 0, "%s", qlt_error());
    cr_assert_eq(c.train.cuda_graph, 1);
    cr_assert_eq(qlt_config_set(&c, "data.train=one.jsonl"), 0, "%s", qlt_error());
    cr_assert_eq(c.data.train.count, 1);
    cr_assert_str_eq(c.data.train.items[0], "one.jsonl");
    cr_assert_eq(qlt_config_set(&c, "data.train=[a.jsonl, 'b.jsonl.gz']"), 0, "%s", qlt_error());
    cr_assert_eq(c.data.train.count, 2);
    cr_assert_str_eq(c.data.train.items[1], "b.jsonl.gz");
    cr_assert_eq(qlt_config_set(&c, "data.eval=x.jsonl,y.jsonl"), 0, "%s", qlt_error());
    cr_assert_eq(c.data.eval.count, 2);
    cr_assert_str_eq(c.data.eval.items[0], "x.jsonl");
    cr_assert_str_eq(c.data.eval.items[1], "y.jsonl");
    cr_assert_eq(qlt_config_set(&c, "data.eval=[]"), 0, "%s", qlt_error());
    cr_assert_eq(c.data.eval.count, 0);
    cr_assert_eq(qlt_config_set(&c, "train.betas=[0.85,0.99]"), 0, "%s", qlt_error());
    cr_assert_eq(c.train.betas[0], 0.85f);
    cr_assert_eq(c.train.betas[1], 0.99f);
    cr_assert_eq(qlt_config_set(&c, "train.betas=0.5, 0.75"), 0, "%s", qlt_error());
    cr_assert_eq(c.train.betas[1], 0.75f);
    cr_assert_eq(qlt_config_set(&c, "model.path=/models/a b"), 0, "%s", qlt_error());
    cr_assert_str_eq(c.model.path, "/models/a b");
    cr_assert_eq(qlt_config_set(&c, "model.path=C:/x: y"), 0, "%s", qlt_error()); /* not YAML: kept as typed */
    cr_assert_str_eq(c.model.path, "C:/x: y");
    cr_assert_eq(qlt_config_set(&c, "model.path="), 0, "%s", qlt_error());
    cr_assert_str_eq(c.model.path, "");
    cr_assert_eq(qlt_config_set(&c, "model.quant=NONE"), 0, "%s", qlt_error());
    cr_assert_eq(c.model.quant, QLT_QUANT_NONE);
    cr_assert_eq(qlt_config_set(&c, "train.seed=18446744073709551615"), 0, "%s", qlt_error());
    cr_assert_eq(c.train.seed, UINT64_MAX);
    cr_assert_eq(qlt_config_set(&c, "output.dir=runs/a=b"), 0, "%s", qlt_error()); /* first '=' splits */
    cr_assert_str_eq(c.output.dir, "runs/a=b");
    qlt_config_free(&c);
}

Test(config, set_errors) {
    expect_set_error("train.lr=abc", "--set train.lr=abc: expected a number");
    expect_set_error("train.learning_rate=1e-4",
                     "--set train.learning_rate=1e-4: unknown key 'train.learning_rate' (did you mean 'train.lr'?)");
    expect_set_error("lr=1e-4", "--set lr=1e-4: unknown key 'lr' (did you mean 'train.lr'?)");
    expect_set_error("trian.seed=3", "--set trian.seed=3: unknown key 'trian.seed' (did you mean 'train.seed'?)");
    expect_set_error("train.lr", "--set train.lr: expected section.key=value (e.g. --set train.lr=1e-4)");
    expect_set_error("train.micro_batch=0", "--set train.micro_batch=0: must be >= 1");
    expect_set_error("train.micro_batch=2.5", "--set train.micro_batch=2.5: expected an integer");
    expect_set_error("lora.targets=[q,x]",
                     "--set lora.targets=[q,x]: expected q, k, v, o, gate, up, down, q_proj ... down_proj or "
                     "all-linear");
    expect_set_error("data.packing=sometimes",
                     "--set data.packing=sometimes: expected true or false (or yes/no, on/off, 1/0)");
    expect_set_error("train.device=tpu", "--set train.device=tpu: expected one of auto, cpu, cuda");
    expect_set_error("train.betas=[0.9]", "--set train.betas=[0.9]: expected two numbers like [0.9, 0.999]");
    expect_set_error("data.train=[a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q]",
                     "--set data.train=[a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q]: at most 16 paths, got 17");
    expect_set_error("zzzzzzzz.qqqqqqqq=1",
                     "--set zzzzzzzz.qqqqqqqq=1: unknown key 'zzzzzzzz.qqqqqqqq' (keys are written section.key; "
                     "sections: model, lora, data, train, output)");
}

/* ---- validation ------------------------------------------------------------------------------------ */

static void expect_invalid(const qlt_config *c, const char *message) {
    cr_assert_eq(qlt_config_validate(c), -1, "expected: %s", message);
    cr_assert_str_eq(qlt_error(), message);
}

/* Sets c.field to `bad`, expects validation to fail with `message`, then puts the old value back. */
#define EXPECT_INVALID(c, field, bad, message)                                                              \
    do {                                                                                                    \
        __typeof__((c).field) saved_ = (c).field;                                                           \
        (c).field = (bad);                                                                                  \
        expect_invalid(&(c), message);                                                                      \
        (c).field = saved_;                                                                                 \
    } while (0)

Test(config, validation) {
    qlt_config c;
    qlt_config_defaults(&c);
    EXPECT_INVALID(c, lora.r, 0, "lora.r = 0: must be >= 1 (e.g. --set lora.r=16)");
    EXPECT_INVALID(c, lora.alpha, 0, "lora.alpha = 0: must be > 0 (e.g. --set lora.alpha=32)");
    EXPECT_INVALID(c, lora.dropout, 1.0f, "lora.dropout = 1: must be in [0, 1) (e.g. --set lora.dropout=0)");
    EXPECT_INVALID(c, lora.targets, 0,
                   "lora.targets: no projection is chosen (e.g. --set lora.targets=all-linear or "
                   "--set 'lora.targets=[q,v]')");
    EXPECT_INVALID(c, data.seq_len, 1, "data.seq_len = 1: must be >= 2 (e.g. --set data.seq_len=2048)");
    EXPECT_INVALID(c, train.micro_batch, 0, "train.micro_batch = 0: must be >= 1 (e.g. --set train.micro_batch=1)");
    EXPECT_INVALID(c, train.grad_accum, -1, "train.grad_accum = -1: must be >= 1 (e.g. --set train.grad_accum=1)");
    EXPECT_INVALID(c, train.lr, 0, "train.lr = 0: must be > 0 (e.g. --set train.lr=2e-4)");
    EXPECT_INVALID(c, train.lr, NAN, "train.lr = null: must be > 0 (e.g. --set train.lr=2e-4)");
    EXPECT_INVALID(c, train.betas[1], 1.0f,
                   "train.betas[1] = 1: must be in [0, 1) (e.g. --set 'train.betas=[0.9, 0.999]')");
    EXPECT_INVALID(c, train.eps, 0, "train.eps = 0: must be > 0 (e.g. --set train.eps=1e-8)");
    EXPECT_INVALID(c, model.nf4_blocksize, 48,
                   "model.nf4_blocksize = 48: must be a power of two from 32 to 4096 "
                   "(e.g. --set model.nf4_blocksize=64)");
    EXPECT_INVALID(c, model.nf4_blocksize, 8192,
                   "model.nf4_blocksize = 8192: must be in [32, 4096] (e.g. --set model.nf4_blocksize=64)");
    EXPECT_INVALID(c, train.warmup_ratio, 1.5f,
                   "train.warmup_ratio = 1.5: must be in [0, 1] (e.g. --set train.warmup_ratio=0)");
    EXPECT_INVALID(c, train.min_lr_ratio, -0.25f,
                   "train.min_lr_ratio = -0.25: must be in [0, 1] (e.g. --set train.min_lr_ratio=0)");
    EXPECT_INVALID(c, data.eval_split, 1.0f, "data.eval_split = 1: must be in [0, 1) (e.g. --set data.eval_split=0)");
    EXPECT_INVALID(c, train.max_steps, -5, "train.max_steps = -5: must be >= 0 (e.g. --set train.max_steps=0)");
    EXPECT_INVALID(c, train.cuda_graph, 2,
                   "train.cuda_graph = 2: must be true or false (e.g. --set train.cuda_graph=false)");
    EXPECT_INVALID(c, train.schedule, (qlt_lr_schedule)7,
                   "train.schedule = 7: expected one of constant, linear, cosine (e.g. --set train.schedule=constant)");
    EXPECT_INVALID(c, train.device, QLT_DEVICE_COUNT,
                   "train.device = 3: expected one of auto, cpu, cuda (e.g. --set train.device=auto)");
    EXPECT_INVALID(c, data.format, (qlt_data_format)-1,
                   "data.format = -1: expected one of text, completion, alpaca, chat, tokens "
                   "(e.g. --set data.format=text)");
    EXPECT_INVALID(c, output.dir, "", "output.dir is empty: name a run directory (e.g. --set output.dir=runs/demo)");

    /* Rules that involve two keys. */
    EXPECT_INVALID(c, train.epochs, 0,
                   "train.epochs = 0 with train.max_steps = 0: nothing would be trained; set "
                   "--set train.epochs=1 or --set train.max_steps=<steps>");
    c.train.max_steps = 10; /* epochs are not used when max_steps is set */
    c.train.epochs = 0;
    cr_assert_eq(qlt_config_validate(&c), 0, "%s", qlt_error());
    c.train.warmup_steps = 5;
    EXPECT_INVALID(c, train.warmup_ratio, 0.1f,
                   "train.warmup_steps = 5 and train.warmup_ratio = 0.1 are both set; keep one "
                   "(e.g. --set train.warmup_ratio=0)");
    cr_assert_eq(qlt_config_set(&c, "data.eval=e.jsonl"), 0, "%s", qlt_error());
    EXPECT_INVALID(c, data.eval_split, 0.1f,
                   "data.eval_split = 0.1 and data.eval are both set; keep one (e.g. --set data.eval_split=0)");
    cr_assert_eq(qlt_config_validate(&c), 0, "%s", qlt_error());
    qlt_config_free(&c);
}

/* ---- JSON round trip ---------------------------------------------------------------------------------- */

static void round_trip(const qlt_config *c) {
    char path[512];
    snprintf(path, sizeof path, "%s/effective.json", tmpdir);
    cr_assert_eq(qlt_config_write_json(c, path), 0, "%s", qlt_error());
    qlt_config back;
    qlt_config_defaults(&back);
    cr_assert_eq(qlt_config_load_file(&back, path), 0, "%s", qlt_error());
    const char *diff = qlt_config_first_difference(c, &back);
    cr_assert_null(diff, "%s differs after the JSON round trip", diff);
    qlt_config_free(&back);
}

Test(config, json_round_trip) {
    qlt_config c;
    qlt_config_defaults(&c);
    round_trip(&c);

    char path[512];
    write_file(path, sizeof path, "full.yaml", full_yaml);
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    cr_assert_eq(qlt_config_set(&c, "train.lr=3.3333e-5"), 0, "%s", qlt_error());
    cr_assert_eq(qlt_config_set(&c, "lora.alpha=0.1"), 0, "%s", qlt_error());
    cr_assert_eq(qlt_config_set(&c, "model.path=quote\" and \\backslash"), 0, "%s", qlt_error());
    round_trip(&c);

    /* The written file speaks the file syntax: sections, HF target names, short numbers. */
    snprintf(path, sizeof path, "%s/effective.json", tmpdir);
    char *json;
    cr_assert_eq(qlt_read_file(path, &json, NULL), 0, "%s", qlt_error());
    cr_assert_not_null(strstr(json, "\"targets\":\t[\"q_proj\", \"v_proj\", \"down_proj\"]"), "%s", json);
    cr_assert_not_null(strstr(json, "\"lr\":\t3.3333e-05"), "%s", json);
    cr_assert_not_null(strstr(json, "\"seed\":\t18446744073709551615"), "%s", json);
    cr_assert_not_null(strstr(json, "\"train\":\t[\"a.jsonl\", \"b c.jsonl.gz\"]"), "%s", json);
    cr_assert_not_null(strstr(json, "\"double_quant\":\tfalse"), "%s", json);
    free(json);

    cr_assert_eq(qlt_config_write_json(&c, "/nonexistent-dir/x.json"), -1);
    cr_assert_str_eq(qlt_error(), "/nonexistent-dir/x.json: cannot write the config: No such file or directory "
                                  "(check that the directory exists and is writable)");
    qlt_config_free(&c);
}

/* ---- enum keys ---------------------------------------------------------------------------------------- */

/* Every enum key and its field; enum_tables_cover_their_c_enums checks that this lists exactly the schema's. */
static const struct {
    const char *key;
    size_t offset;
} enum_fields[] = {
    {"model.quant", offsetof(qlt_config, model.quant)},
    {"data.format", offsetof(qlt_config, data.format)},
    {"data.chat_template", offsetof(qlt_config, data.chat_template)},
    {"train.device", offsetof(qlt_config, train.device)},
    {"train.schedule", offsetof(qlt_config, train.schedule)},
    {"train.backward_a", offsetof(qlt_config, train.backward_a)},
    {"train.grad_checkpoint", offsetof(qlt_config, train.grad_checkpoint)},
    {"train.attention", offsetof(qlt_config, train.attention)},
};
#define N_ENUM_FIELDS (sizeof enum_fields / sizeof enum_fields[0])

static int enum_field(const qlt_config *c, size_t i) { return *(const int *)((const char *)c + enum_fields[i].offset); }

static const qlt_config_key *find_key(const char *name) {
    for (int64_t i = 0; i < qlt_config_key_count(); i++)
        if (!strcmp(qlt_config_key_at(i)->name, name)) return qlt_config_key_at(i);
    return NULL;
}

/* Each enum key's (text, value) table names every value of its C enum exactly once (0 .. *_COUNT-1), in the
 * order of the choices the help and docs print, and its default is one of them; other keys have no table. */
Test(config, enum_tables_cover_their_c_enums) {
    size_t enums = 0;
    for (int64_t i = 0; i < qlt_config_key_count(); i++) {
        const qlt_config_key *k = qlt_config_key_at(i);
        if (strcmp(k->type, "enum") != 0) {
            cr_assert(k->values == NULL && k->value_count == 0 && k->enum_count == 0, "%s has enum values", k->name);
            continue;
        }
        enums++;
        size_t listed = 0;
        while (listed < N_ENUM_FIELDS && strcmp(enum_fields[listed].key, k->name)) listed++;
        cr_assert_lt(listed, N_ENUM_FIELDS, "enum key %s is missing from this test's enum_fields", k->name);
        cr_assert_not_null(k->values, "%s", k->name);
        cr_assert_eq(k->value_count, k->enum_count, "%s: %d texts for a C enum of %d values", k->name,
                     k->value_count, k->enum_count);
        int seen[16] = {0};
        cr_assert_leq(k->enum_count, 16);
        char choices[256] = "";
        int has_default = 0;
        for (int v = 0; v < k->value_count; v++) {
            int value = k->values[v].value;
            cr_assert(value >= 0 && value < k->enum_count, "%s: value %d of '%s' is outside its C enum", k->name,
                      value, k->values[v].text);
            cr_assert_eq(seen[value]++, 0, "%s: value %d has two texts", k->name, value);
            cr_assert_str_eq(qlt_config_enum_text(k->name, value), k->values[v].text);
            snprintf(choices + strlen(choices), sizeof choices - strlen(choices), "%s%s", v ? ", " : "",
                     k->values[v].text);
            has_default |= !strcmp(k->values[v].text, k->default_text);
        }
        cr_assert_str_eq(choices, k->choices, "%s: the table and the documented choices differ", k->name);
        cr_assert(has_default, "%s: the default '%s' is not one of its values", k->name, k->default_text);
        cr_assert_str_eq(qlt_config_enum_text(k->name, k->enum_count), "?");
    }
    cr_assert_eq(enums, N_ENUM_FIELDS, "the schema has %zu enum keys, this test lists %zu", enums, N_ENUM_FIELDS);
}

/* The text after `"key":\t` in written JSON text is `"value"` (the written form of a string). */
static void expect_json_value(const char *json, const char *dotted, const char *value) {
    char needle[128];
    snprintf(needle, sizeof needle, "\"%s\":\t\"%s\"", strchr(dotted, '.') + 1, value);
    cr_assert_not_null(strstr(json, needle), "the JSON lacks %s: %s", needle, json);
}

/* Enum keys go file -> struct (enum values) -> JSON (the same text as before the keys were enums: the value
 * as listed, lower case) -> struct, unchanged; then every value of every enum key does the same through
 * --set. Exact comparisons. */
Test(config, enum_keys_round_trip) {
    char path[512], json_path[512];
    write_file(path, sizeof path, "enums.yaml",
               "model:\n  quant: None\ndata:\n  format: COMPLETION\n  chat_template: chatml\n"
               "train:\n  device: cpu\n  schedule: linear\n  backward_a: fp32\n  grad_checkpoint: auto\n"
               "  attention: Own\n");
    snprintf(json_path, sizeof json_path, "%s/enums.json", tmpdir);
    qlt_config c, back;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, path), 0, "%s", qlt_error());
    cr_assert_eq(c.model.quant, QLT_QUANT_NONE);
    cr_assert_eq(c.data.format, QLT_DATA_FORMAT_COMPLETION);
    cr_assert_eq(c.data.chat_template, QLT_CHAT_TEMPLATE_CHATML);
    cr_assert_eq(c.train.device, QLT_DEVICE_CPU);
    cr_assert_eq(c.train.schedule, QLT_LR_SCHEDULE_LINEAR);
    cr_assert_eq(c.train.backward_a, QLT_BACKWARD_PRECISION_FP32);
    cr_assert_eq(c.train.grad_checkpoint, QLT_GRAD_CHECKPOINT_AUTO);
    cr_assert_eq(c.train.attention, QLT_ATTENTION_IMPL_OWN);
    cr_assert_eq(qlt_config_write_json(&c, json_path), 0, "%s", qlt_error());
    char *json;
    cr_assert_eq(qlt_read_file(json_path, &json, NULL), 0, "%s", qlt_error());
    expect_json_value(json, "model.quant", "none");
    expect_json_value(json, "data.format", "completion");
    expect_json_value(json, "data.chat_template", "chatml");
    expect_json_value(json, "train.device", "cpu");
    expect_json_value(json, "train.schedule", "linear");
    expect_json_value(json, "train.backward_a", "fp32");
    expect_json_value(json, "train.grad_checkpoint", "auto");
    expect_json_value(json, "train.attention", "own");
    free(json);
    qlt_config_defaults(&back);
    cr_assert_eq(qlt_config_load_file(&back, json_path), 0, "%s", qlt_error());
    cr_assert_null(qlt_config_first_difference(&c, &back), "%s differs", qlt_config_first_difference(&c, &back));
    cr_assert_eq(back.train.schedule, QLT_LR_SCHEDULE_LINEAR);
    cr_assert_eq(back.train.attention, QLT_ATTENTION_IMPL_OWN);
    qlt_config_free(&back);

    for (size_t f = 0; f < N_ENUM_FIELDS; f++) {
        const qlt_config_key *k = find_key(enum_fields[f].key);
        cr_assert_not_null(k, "%s", enum_fields[f].key);
        for (int v = 0; v < k->value_count; v++) {
            char assignment[128];
            snprintf(assignment, sizeof assignment, "%s=%s", k->name, k->values[v].text);
            cr_assert_eq(qlt_config_set(&c, assignment), 0, "%s", qlt_error());
            cr_assert_eq(enum_field(&c, f), k->values[v].value, "--set %s", assignment);
            cr_assert_eq(qlt_config_write_json(&c, json_path), 0, "%s", qlt_error());
            cr_assert_eq(qlt_read_file(json_path, &json, NULL), 0, "%s", qlt_error());
            expect_json_value(json, k->name, k->values[v].text);
            free(json);
            qlt_config_defaults(&back);
            cr_assert_eq(qlt_config_load_file(&back, json_path), 0, "%s", qlt_error());
            cr_assert_eq(enum_field(&back, f), k->values[v].value, "%s after the JSON round trip", assignment);
            cr_assert_null(qlt_config_first_difference(&c, &back), "%s", assignment);
            qlt_config_free(&back);
        }
    }
    qlt_config_free(&c);
}

Test(config, copy_and_difference) {
    qlt_config a, b;
    qlt_config_defaults(&a);
    cr_assert_eq(qlt_config_set(&a, "data.train=[x, y]"), 0, "%s", qlt_error());
    qlt_config_copy(&b, &a);
    cr_assert_null(qlt_config_first_difference(&a, &b));
    cr_assert_neq(a.data.train.items[0], b.data.train.items[0], "the copy must own its strings");
    cr_assert_eq(qlt_config_set(&b, "output.keep_last=4"), 0, "%s", qlt_error());
    cr_assert_str_eq(qlt_config_first_difference(&a, &b), "output.keep_last");
    cr_assert_eq(qlt_config_set(&b, "data.train=[x, z]"), 0, "%s", qlt_error());
    cr_assert_str_eq(qlt_config_first_difference(&a, &b), "data.train");
    qlt_config_free(&b);
    qlt_config_copy(&b, &a);
    cr_assert_eq(qlt_config_set(&b, "train.attention=cudnn"), 0, "%s", qlt_error());
    cr_assert_str_eq(qlt_config_first_difference(&a, &b), "train.attention"); /* enum keys compare too */
    qlt_config_free(&a);
    qlt_config_free(&b);
}

/* ---- help and docs --------------------------------------------------------------------------------- */

Test(config, help_lists_every_key) {
    char path[512];
    snprintf(path, sizeof path, "%s/help.txt", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    qlt_config_fprint_help(f);
    fclose(f);
    char *help;
    cr_assert_eq(qlt_read_file(path, &help, NULL), 0, "%s", qlt_error());
    cr_assert_geq(qlt_config_key_count(), 45);
    for (int64_t i = 0; i < qlt_config_key_count(); i++) {
        const qlt_config_key *k = qlt_config_key_at(i);
        char line[512];
        snprintf(line, sizeof line, "  %s  (%s, default %s", k->name, k->type, k->default_text);
        cr_assert_not_null(strstr(help, line), "help lacks '%s'", line);
        cr_assert_not_null(strstr(help, k->help), "help lacks the help of %s", k->name);
    }
    cr_assert_not_null(strstr(help, "\ntrain:\n"));
    free(help);
}

/* The row docs/CONFIG.md must hold for key k. */
static void doc_row(const qlt_config_key *k, char *row, size_t size) {
    snprintf(row, size, "| `%s` | %s | `%s` | %s | %s |", k->name, k->type, k->default_text,
             k->choices ? k->choices : k->range ? k->range : "", k->help);
}

Test(config, docs_list_every_key) {
    char *docs;
    cr_assert_eq(qlt_read_file(QLT_TEST_DATA "/../../docs/CONFIG.md", &docs, NULL), 0, "%s", qlt_error());
    char expected_path[512];
    snprintf(expected_path, sizeof expected_path, "/tmp/qlt-CONFIG-rows-%ld.md", (long)getpid());
    int missing = 0;
    FILE *rows = fopen(expected_path, "w");
    cr_assert_not_null(rows);
    for (int64_t i = 0; i < qlt_config_key_count(); i++) {
        char row[1024];
        doc_row(qlt_config_key_at(i), row, sizeof row);
        fprintf(rows, "%s\n", row);
        if (!strstr(docs, row)) {
            cr_log_error("docs/CONFIG.md lacks the row: %s", row);
            missing++;
        }
    }
    fclose(rows);
    free(docs);
    cr_assert_eq(missing, 0, "docs/CONFIG.md is out of date: %d rows differ (the expected rows are in %s)", missing,
                 expected_path);
    unlink(expected_path);
}

Test(config, example_config_is_valid) {
    qlt_config c;
    qlt_config_defaults(&c);
    cr_assert_eq(qlt_config_load_file(&c, QLT_TEST_DATA "/../../configs/example.yaml"), 0, "%s", qlt_error());
    cr_assert_eq(qlt_config_validate(&c), 0, "%s", qlt_error());
    cr_assert_str_eq(c.model.path, "path/to/model");
    qlt_config_free(&c);
}

Test(config, edit_distance) {
    cr_assert_eq(qlt_edit_distance("", ""), 0);
    cr_assert_eq(qlt_edit_distance("abc", ""), 3);
    cr_assert_eq(qlt_edit_distance("kitten", "sitting"), 3);
    cr_assert_eq(qlt_edit_distance("dropuot", "dropout"), 1); /* a swap costs one */
    cr_assert_eq(qlt_edit_distance("Learning-Rate", "learning_rate"), 0);
    cr_assert_eq(qlt_edit_distance("ca", "abc"), 3); /* optimal string alignment, not unrestricted */
}

/* model.fallback replaces a model.path that does not exist (with a notice), and nothing else: an existing path
 * stays, and without a fallback a missing path stays for the loader to report. */
Test(config, model_fallback_only_when_the_path_is_missing) {
    qlt_config cfg;
    qlt_config_defaults(&cfg);
    cr_assert_eq(qlt_config_set(&cfg, "model.path=/nonexistent/model.gguf"), 0, "%s", qlt_error());
    cr_expect_eq(qlt_config_apply_model_fallback(&cfg), 0, "no fallback set: nothing changes");
    cr_expect_str_eq(cfg.model.path, "/nonexistent/model.gguf");
    cr_assert_eq(qlt_config_set(&cfg, "model.fallback=random:" QLT_TEST_DATA "/fixtures/tiny-llama/config.json"), 0);
    cr_expect_eq(qlt_config_apply_model_fallback(&cfg), 1);
    cr_expect_str_eq(cfg.model.path, "random:" QLT_TEST_DATA "/fixtures/tiny-llama/config.json");
    cr_expect_eq(qlt_config_apply_model_fallback(&cfg), 0, "random:<existing config.json> exists: no switch");
    cr_assert_eq(qlt_config_set(&cfg, "model.path=" QLT_TEST_DATA "/fixtures/tiny-qwen2"), 0);
    cr_expect_eq(qlt_config_apply_model_fallback(&cfg), 0, "an existing directory stays");
    cr_expect_str_eq(cfg.model.path, QLT_TEST_DATA "/fixtures/tiny-qwen2");
    qlt_config_free(&cfg);
}
