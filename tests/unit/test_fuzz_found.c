/* test_fuzz_found.c: the inputs the libFuzzer harnesses (tests/fuzz, scripts/fuzz.sh) found that crashed or
 * misreported, cut down to what triggers each: every one must now fail with one line naming the file and
 * the problem (docs/RELIABILITY.md lists them). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "config/config.h"
#include "data/dataset_internal.h"
#include "data/jsonl.h"
#include "cpu/backend_cpu.h"
#include "model/model.h"
#include "model/model_config.h"
#include "formats/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

/* The recorded error is one line that holds each of the needles. */
static void expect_line(const char *needle1, const char *needle2) {
    const char *e = qlt_error();
    cr_expect(e[0] != 0, "an error was recorded");
    cr_expect(strchr(e, '\n') == NULL && strchr(e, '\r') == NULL, "one line: %s", e);
    cr_expect(strstr(e, needle1) != NULL, "error mentions '%s': %s", needle1, e);
    if (needle2) cr_expect(strstr(e, needle2) != NULL, "error mentions '%s': %s", needle2, e);
}

/* fuzz_safetensors_index: a weight_map value that is not a string was named in the message after the
 * parsed index had been freed (heap use after free). */
Test(fuzz_found, index_weight_map_value_not_a_string) {
    char *dir = test_tmpdir();
    char *index = qlt_path_join(dir, "model.safetensors.index.json");
    test_write_text(index, "{\"weight_map\": {\"model.a\": \"a.safetensors\", \"model.b\": [1, 2]}}");
    qlt_st_dir d;
    cr_expect_eq(qlt_st_dir_open(&d, dir), -1);
    expect_line(index, "weight_map['model.b'] is not a file name");
    qlt_remove_tree(dir);
    free(index);
    free(dir);
}

/* fuzz_model_config, fuzz_config_json, fuzz_chat_template: a key or name quoted from the input that holds
 * a newline split the error over two lines; control characters are now written as escapes. */
Test(fuzz_found, architecture_with_newline_is_escaped) {
    qlt_model_config mc;
    cr_expect_eq(qlt_model_config_parse(&mc, "{\"architectures\": [\"LlamaForCausl L\\nM a\"]}", "x/config.json"), -1);
    expect_line("x/config.json", "LlamaForCausl L\\nM a");
}

Test(fuzz_found, config_key_with_newline_is_escaped) {
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, "run.json");
    test_write_text(path, "{\"model\": {\"double_qu\\nt\": true}}");
    qlt_config cfg;
    qlt_config_defaults(&cfg);
    cr_expect_eq(qlt_config_load_file(&cfg, path), -1);
    expect_line(path, "unknown key 'model.double_qu\\nt'");
    qlt_config_free(&cfg);
    qlt_remove_tree(dir);
    free(path);
    free(dir);
}

Test(fuzz_found, error_line_escapes_every_control_character) {
    qlt_fail("a\tb\rc\x01" "d\x7f" "e");
    cr_expect_str_eq(qlt_error(), "a\\tb\\rc\\x01d\\x7fe");
    qlt_fail_context("ctx\n");
    cr_expect_str_eq(qlt_error(), "ctx\\n: a\\tb\\rc\\x01d\\x7fe");
}

/* A dataset line is buffered whole before it is parsed: a file without a newline (here a small .gz that
 * inflates to 257 MiB) is refused at 256 MiB, naming the file and line, instead of filling memory. */
Test(fuzz_found, jsonl_line_longer_than_256_mib) {
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, "long.jsonl.gz");
    gzFile gz = gzopen(path, "wb1");
    cr_assert(gz);
    enum { CHUNK = 1 << 20 };
    char *chunk = malloc(CHUNK);
    memset(chunk, 'a', CHUNK);
    cr_assert_eq(gzwrite(gz, "{\"text\": \"", 10), 10);
    for (int i = 0; i < 257; i++) cr_assert_eq(gzwrite(gz, chunk, CHUNK), CHUNK);
    gzclose(gz);
    free(chunk);
    qlt_jsonl *r;
    cr_assert_eq(qlt_jsonl_open(&r, path), 0, "%s", qlt_error());
    const char *line;
    size_t len;
    cr_expect_eq(qlt_jsonl_next(r, &line, &len), -1);
    expect_line(path, "line 1 is longer than 256 MiB");
    qlt_jsonl_close(r);
    qlt_remove_tree(dir);
    free(path);
    free(dir);
}

/* fuzz_tokenizer: an empty string as the first vocabulary entry copied zero bytes from a NULL buffer
 * (undefined behaviour that clang's UBSan reports); it now loads, and the other tokens still encode. */
Test(fuzz_found, tokenizer_empty_first_token) {
    static const char json[] = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\": 0, \"a\": 1}, \"merges\": []}}";
    qlt_tokenizer *tok = NULL;
    cr_assert_eq(qlt_tokenizer_load_json(&tok, json, sizeof json - 1, "t.json"), 0, "%s", qlt_error());
    qlt_ids ids = {0};
    cr_assert_eq(qlt_tokenizer_encode(tok, "aa", 2, &ids), 0, "%s", qlt_error());
    cr_expect_eq(ids.len, 2);
    cr_expect(ids.len == 2 && ids.data[0] == 1 && ids.data[1] == 1);
    free(ids.data);
    qlt_tokenizer_free(tok);
}

/* fuzz_bnb_checkpoint: a model directory with config.json and no safetensors file sorted a NULL list
 * (qsort's argument must not be NULL, even for 0 elements); it is refused in one line. */
Test(fuzz_found, model_dir_without_safetensors) {
    char *dir = test_tmpdir();
    char *config = qlt_path_join(dir, "config.json");
    test_write_text(config, "{}");
    qlt_st_dir d;
    cr_expect_eq(qlt_st_dir_open(&d, dir), -1);
    expect_line(dir, "no model.safetensors, index or *.safetensors file found");
    qlt_remove_tree(dir);
    free(config);
    free(dir);
}

/* The same NULL list for an index whose weight_map is empty: it opens with no shards. */
Test(fuzz_found, index_with_empty_weight_map) {
    char *dir = test_tmpdir();
    char *index = qlt_path_join(dir, "model.safetensors.index.json");
    test_write_text(index, "{\"weight_map\": {}}");
    qlt_st_dir d;
    cr_expect_eq(qlt_st_dir_open(&d, dir), 0, "%s", qlt_error());
    cr_expect_eq(d.n_files, 0);
    qlt_st_dir_close(&d);
    qlt_remove_tree(dir);
    free(index);
    free(dir);
}

/* fuzz_tokenizer: one stray id (159999999 in a vocabulary of 163 tokens) sized the id tables by it: 4 GB
 * with 2e9, before any check. Ids far past the number of tokens are refused. */
Test(fuzz_found, tokenizer_stray_large_id) {
    static const char json[] =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2000000000}, \"merges\": []}}";
    qlt_tokenizer *tok = NULL;
    cr_expect_eq(qlt_tokenizer_load_json(&tok, json, sizeof json - 1, "t.json"), -1);
    expect_line("t.json", "token id 2000000000 is far past the 2 tokens");
    static const char holes[] = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1000}, \"merges\": []}}";
    cr_expect_eq(qlt_tokenizer_load_json(&tok, holes, sizeof holes - 1, "t.json"), 0, "a few gaps load: %s",
                 qlt_error());
    qlt_tokenizer_free(tok);
}

/* fuzz_gguf: block_count sized the layer table before any layer was looked for, so a count of 9e8
 * allocated 34 GB (out of memory, exit). The last block must now exist first; the same for
 * num_hidden_layers in config.json. */
Test(fuzz_found, gguf_block_count_past_the_tensors) {
    char *src = NULL, *data;
    size_t len;
    if (asprintf(&src, "%s/gguf/tiny-llama.f32.gguf", QLT_TEST_DATA) < 0) abort();
    cr_assert_eq(qlt_read_file(src, &data, &len), 0, "%s", qlt_error());
    char *key = memmem(data, len, "llama.block_count", 17);
    cr_assert(key);
    uint32_t type, count = 900000000;
    memcpy(&type, key + 17, 4);
    cr_assert_eq(type, 4, "block_count is a u32");
    memcpy(key + 21, &count, 4);
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, "big.gguf");
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fwrite(data, 1, len, f);
    fclose(f);
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    qlt_model m;
    qlt_model_load_opts opts = {.nf4 = 0, .nf4_blocksize = 64, .double_quant = 1};
    cr_expect_eq(qlt_model_load_gguf(&m, be, path, &opts), -1);
    expect_line(path, "block_count is 900000000 but tensor blk.899999999.attn_norm.weight is missing");
    be->destroy(be);
    qlt_remove_tree(dir);
    free(path);
    free(dir);
    free(data);
    free(src);
}

Test(fuzz_found, config_num_hidden_layers_past_the_tensors) {
    char *dir = test_tmpdir();
    char *src = test_fixture_path("tiny-llama", NULL), cmd[4096];
    snprintf(cmd, sizeof cmd, "cp %s/model.safetensors %s/ && sed 's/\"num_hidden_layers\": *[0-9]*/"
             "\"num_hidden_layers\": 900000000/' %s/config.json > %s/config.json", src, dir, src, dir);
    cr_assert_eq(system(cmd), 0);
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    qlt_model m;
    qlt_model_load_opts opts = {.nf4 = 0, .nf4_blocksize = 64, .double_quant = 1};
    cr_expect_eq(qlt_model_load(&m, be, dir, &opts), -1);
    expect_line(dir, "num_hidden_layers 900000000 but tensor model.layers.899999999.input_layernorm.weight is "
                     "missing");
    be->destroy(be);
    qlt_remove_tree(dir);
    free(src);
    free(dir);
}

/* fuzz_dataset_line: a token id past what an int holds (62222222222222222222) was cast to int32 before it was
 * range-checked (undefined behaviour, reported by clang's UBSan); now it is refused like any bad id, as are the
 * largest whole numbers just past either end of int32, while the ends themselves pass the integer check. */
Test(fuzz_found, token_id_past_int32) {
    qlt_example_ctx c = {.format = QLT_DATA_FORMAT_TOKENS};
    qlt_ids ids = {0}, labels = {0};
    static const char *const bad[] = {"{\"input_ids\": [5, 62222222222222222222]}", "{\"input_ids\": [2147483648]}",
                                      "{\"input_ids\": [1], \"labels\": [-2147483649]}", "{\"input_ids\": [1e300]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(qlt_example_parse(&c, bad[i], strlen(bad[i]), &ids, &labels), -1, "%s", bad[i]);
        expect_line("is not a valid token id", NULL);
        cr_expect_eq(ids.len, 0, "nothing appended for %s", bad[i]);
    }
    const char *ok = "{\"input_ids\": [2147483647, 0]}";
    cr_expect_eq(qlt_example_parse(&c, ok, strlen(ok), &ids, &labels), 0, "%s", qlt_error());
    cr_expect(ids.len == 2 && ids.data[0] == 2147483647, "the largest int32 id is kept");
    free(ids.data);
    free(labels.data);
}
