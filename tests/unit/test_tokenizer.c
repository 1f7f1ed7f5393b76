/* test_tokenizer.c: the tokenizer equals Hugging Face tokenizers' encode(text, add_special_tokens=False)
 * on every golden encoding (the small fixtures always; the real Qwen3 / Llama-3 tokenizers from
 * ../shared when present), decode(encode(text)) is the normalized text, both merge layouts load, and
 * unsupported or broken tokenizer.json files fail with a clear message. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

#define TOK_QWEN2STYLE QLT_TEST_DATA "/fixtures/tok-qwen2style"
#define TOK_LLAMA3STYLE QLT_TEST_DATA "/fixtures/tok-llama3style"
#define TOK_QWEN3 QLT_SHARED_DIR "/assets/tokenizers/qwen3"
#define TOK_LLAMA3 QLT_SHARED_DIR "/assets/tokenizers/llama3"

static cJSON *read_json(const char *path) {
    char *data;
    size_t len;
    cr_assert_eq(qlt_read_file(path, &data, &len), 0, "%s", qlt_error());
    cJSON *j = cJSON_ParseWithLength(data, len);
    free(data);
    cr_assert_not_null(j, "%s: bad JSON", path);
    return j;
}

/* Checks every golden of dir/golden_dev.json with the tokenizer at tok_path; nfc: the tokenizer
 * normalizes with NFC (so decode gives NFC(text)), else decode gives text itself. */
static void check_goldens(const char *dir, const char *tok_path, int nfc) {
    char path[1024];
    snprintf(path, sizeof path, "%s/golden_dev.json", dir);
    cJSON *goldens = read_json(path);
    qlt_tokenizer *tok;
    cr_assert_eq(qlt_tokenizer_load(&tok, tok_path), 0, "%s", qlt_error());
    qlt_encoder *enc = qlt_encoder_new(tok);
    int checked = 0;
    for (cJSON *g = goldens->child; g; g = g->next, checked++) {
        const char *text = cJSON_GetObjectItem(g, "text")->valuestring;
        cJSON *want = cJSON_GetObjectItem(g, "ids");
        qlt_ids ids = {0};
        cr_assert_eq(qlt_encoder_encode(enc, text, strlen(text), &ids), 0, "%s", qlt_error());
        cr_assert_eq(ids.len, cJSON_GetArraySize(want), "%s: \"%s\": %lld ids, want %d", dir, text, (long long)ids.len,
                     cJSON_GetArraySize(want));
        int64_t i = 0;
        for (cJSON *w = want->child; w; w = w->next, i++)
            cr_assert_eq(ids.data[i], w->valueint, "%s: \"%s\": id %lld is %d, want %d", dir, text, (long long)i,
                         ids.data[i], w->valueint);
        char *back;
        size_t back_len;
        cr_assert_eq(qlt_tokenizer_decode(tok, ids.data, ids.len, &back, &back_len), 0, "%s", qlt_error());
        char *expect = nfc ? (char *)utf8proc_NFC((const utf8proc_uint8_t *)text) : strdup(text);
        cr_assert_str_eq(back, expect, "%s: decode(encode(\"%s\"))", dir, text);
        free(expect);
        free(back);
        qlt_ids_free(&ids);
    }
    cr_assert_gt(checked, 20);
    qlt_encoder_free(enc);
    qlt_tokenizer_free(tok);
    cJSON_Delete(goldens);
}

Test(tokenizer, golden_qwen2style_fixture) { check_goldens(TOK_QWEN2STYLE, TOK_QWEN2STYLE "/tokenizer.json", 1); }
Test(tokenizer, golden_llama3style_fixture) { check_goldens(TOK_LLAMA3STYLE, TOK_LLAMA3STYLE "/tokenizer.json", 1); }

Test(tokenizer, golden_qwen3_real) {
    if (!qlt_file_exists(TOK_QWEN3 "/tokenizer.json")) cr_skip_test("../shared/assets/tokenizers/qwen3 absent");
    check_goldens(TOK_QWEN3, TOK_QWEN3 "/tokenizer.json", 1);
}

Test(tokenizer, golden_llama3_real) {
    if (!qlt_file_exists(TOK_LLAMA3 "/tokenizer.json")) cr_skip_test("../shared/assets/tokenizers/llama3 absent");
    check_goldens(TOK_LLAMA3, TOK_LLAMA3 "/tokenizer.json", 0); /* Llama-3 has no normalizer */
}

/* Writes len bytes of data as <fresh test_tmpdir()>/<name>; returns the path (heap; remove_temp undoes it). */
static char *write_temp(const char *name, const char *data, size_t len) {
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, name);
    test_write_bytes(path, data, len);
    free(dir);
    return path;
}

/* Removes the directory write_temp made for path, and frees path. */
static void remove_temp(char *path) {
    *strrchr(path, '/') = '\0';
    cr_assert_eq(qlt_remove_tree(path), 0, "%s", qlt_error());
    free(path);
}

/* The qwen2-style fixture with its merges rewritten as "a b" strings (the Llama-3 / GPT-2 layout) must
 * encode the goldens identically. */
Test(tokenizer, merges_as_strings) {
    cJSON *j = read_json(TOK_QWEN2STYLE "/tokenizer.json");
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "merges");
    cJSON *strings = cJSON_CreateArray();
    for (cJSON *m = merges->child; m; m = m->next) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s %s", m->child->valuestring, m->child->next->valuestring);
        cJSON_AddItemToArray(strings, cJSON_CreateString(buf));
    }
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "model"), "merges", strings);
    char *text = cJSON_PrintUnformatted(j);
    char *path = write_temp("tokenizer.json", text, strlen(text));
    check_goldens(TOK_QWEN2STYLE, path, 1);
    remove_temp(path);
    free(text);
    cJSON_Delete(j);
}

/* A Sequence normalizer whose "normalizers" is null (or absent) is an empty sequence: it used to crash the
 * loader with a NULL dereference. */
Test(tokenizer, sequence_normalizer_without_list) {
    cJSON *j = read_json(TOK_QWEN2STYLE "/tokenizer.json");
    cJSON *norm = cJSON_CreateObject();
    cJSON_AddStringToObject(norm, "type", "Sequence");
    cJSON_AddNullToObject(norm, "normalizers");
    cJSON_ReplaceItemInObject(j, "normalizer", norm);
    char *text = cJSON_PrintUnformatted(j);
    char *path = write_temp("tokenizer.json", text, strlen(text));
    qlt_tokenizer *tok;
    cr_assert_eq(qlt_tokenizer_load(&tok, path), 0, "%s", qlt_error());
    qlt_ids ids = {0};
    cr_assert_eq(qlt_tokenizer_encode(tok, "Hello", 5, &ids), 0, "%s", qlt_error());
    cr_assert_eq(ids.len, 3);
    cr_assert_eq(ids.data[0], 39);
    qlt_ids_free(&ids);
    qlt_tokenizer_free(tok);
    remove_temp(path);
    free(text);
    cJSON_Delete(j);
}

static void expect_load_error(const char *json, size_t len, const char *needle) {
    char *path = write_temp("tokenizer.json", json, len);
    qlt_tokenizer *tok = (qlt_tokenizer *)1;
    qlt_error_clear();
    cr_assert_eq(qlt_tokenizer_load(&tok, path), -1, "loading should fail (%s)", needle);
    cr_assert_null(tok);
    cr_assert(strstr(qlt_error(), needle), "error \"%s\" should mention \"%s\"", qlt_error(), needle);
    cr_assert(strstr(qlt_error(), path), "error \"%s\" should name the file", qlt_error());
    remove_temp(path);
}

Test(tokenizer, unsupported_models_name_what_is_supported) {
    const char *unigram = "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]]}}";
    expect_load_error(unigram, strlen(unigram), "Unigram");
    expect_load_error(unigram, strlen(unigram), "BPE tokenizers: byte-level");
    const char *wordpiece = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}";
    expect_load_error(wordpiece, strlen(wordpiece), "WordPiece");
    const char *suffix = "{\"model\": {\"type\": \"BPE\", \"end_of_word_suffix\": \"</w>\", \"vocab\": {\"a\": 0},"
                         " \"merges\": []}}";
    expect_load_error(suffix, strlen(suffix), "subword prefix/suffix");
}

Test(tokenizer, truncated_or_malformed_file_is_a_clear_error) {
    char *data;
    size_t len;
    cr_assert_eq(qlt_read_file(TOK_QWEN2STYLE "/tokenizer.json", &data, &len), 0);
    expect_load_error(data, len / 2, "truncated or malformed");
    expect_load_error(data, 1, "truncated or malformed");
    expect_load_error("", 0, "truncated or malformed");
    expect_load_error("[1, 2]", 6, "not a Hugging Face tokenizer.json");
    /* a merge naming a token that is not in the vocabulary */
    const char *bad_merge = "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\","
                            " \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}";
    expect_load_error(bad_merge, strlen(bad_merge), "merges[0]");
    const char *bad_vocab = "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\","
                            " \"vocab\": {\"a\": \"zero\"}, \"merges\": []}}";
    expect_load_error(bad_vocab, strlen(bad_vocab), "model.vocab[\"a\"]");
    free(data);
}

Test(tokenizer, special_ids_and_invalid_utf8) {
    qlt_tokenizer *tok;
    cr_assert_eq(qlt_tokenizer_load(&tok, TOK_QWEN2STYLE "/tokenizer.json"), 0, "%s", qlt_error());
    cr_assert_eq(qlt_tokenizer_token_id(tok, "<|im_start|>"), 3001);
    cr_assert_eq(qlt_tokenizer_eos_id(tok), 3000);
    cr_assert_eq(qlt_tokenizer_pad_id(tok), 3000);
    cr_assert_eq(qlt_tokenizer_n_ids(tok), 3003);
    qlt_ids ids = {0};
    cr_assert_eq(qlt_tokenizer_encode(tok, "ok\xff", 3, &ids), -1);
    cr_assert(strstr(qlt_error(), "UTF-8"));
    cr_assert_eq(ids.len, 0);
    int32_t bad = 99999;
    char *text;
    size_t len;
    cr_assert_eq(qlt_tokenizer_decode(tok, &bad, 1, &text, &len), -1);
    cr_assert(strstr(qlt_error(), "99999"));
    /* half of a UTF-8 sequence decodes to U+FFFD, like Hugging Face's lossy decoder */
    int32_t lead = qlt_tokenizer_token_id(tok, "\xc3");
    cr_assert_geq(lead, 0);
    cr_assert_eq(qlt_tokenizer_decode(tok, &lead, 1, &text, &len), 0);
    cr_assert_str_eq(text, "\xef\xbf\xbd");
    free(text);
    qlt_ids_free(&ids);
    qlt_tokenizer_free(tok);
}

/* Runs `qlora-train tokenize args` with input on stdin; returns its exit status and stdout+stderr in *out. */
static int run_tokenize(const char *args, const char *input, char **out) {
    char *in_path = write_temp("in.txt", input, strlen(input));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "tokenize %s < %s", args, in_path);
    int status = test_run_cli(NULL, cmd, out);
    remove_temp(in_path);
    return status;
}

Test(tokenizer, cli_encode_and_decode) {
    char *out;
    int status =
        run_tokenize("--tokenizer " TOK_QWEN2STYLE "/tokenizer.json", "\"Hello world\"\n\"a<|endoftext|>b\"\n", &out);
    cr_assert_str_eq(out, "[39,422,323,2025,1734]\n[64,3000,65]\n");
    cr_assert_eq(status, 0);
    free(out);
    status = run_tokenize("--tokenizer " TOK_QWEN2STYLE "/tokenizer.json --decode",
                          "[39,422,323,2025,1734]\n[64,3000,65]\n", &out);
    cr_assert_str_eq(out, "\"Hello world\"\n\"a<|endoftext|>b\"\n");
    cr_assert_eq(status, 0);
    free(out);
    status = run_tokenize("--tokenizer " TOK_QWEN2STYLE "/tokenizer.json", "\"ok\"\nnot json\n", &out);
    cr_assert(strstr(out, "stdin line 2"), "%s", out);
    cr_assert_neq(status, 0, "%s", out);
    free(out);
}

/* A token id with a fraction is refused, not cut to another id (3000.5 was read as 3000). */
Test(tokenizer, fractional_token_ids_are_refused) {
    char *text;
    size_t len;
    cr_assert_eq(qlt_read_file(TOK_QWEN2STYLE "/tokenizer.json", &text, &len), 0);
    char *id = strstr(text, "\"id\": 3000");
    cr_assert(id, "the fixture's first added token has id 3000");
    char *edited = NULL;
    *id = '\0';
    if (asprintf(&edited, "%s\"id\": 3000.5%s", text, id + strlen("\"id\": 3000")) < 0) abort();
    expect_load_error(edited, strlen(edited), "added_tokens[0] needs an integer \"id\"");
    free(edited);
    free(text);
    char *out;
    int status = run_tokenize("--tokenizer " TOK_QWEN2STYLE "/tokenizer.json --decode", "[39.5]\n", &out);
    cr_expect_neq(status, 0, "%s", out);
    cr_expect(strstr(out, "stdin line 1: expected a JSON array of token ids"), "%s", out);
    free(out);
}
