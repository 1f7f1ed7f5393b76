/* test_gguf_tokenizer.c: tokenizers from GGUF metadata (src/formats/gguf_tokenizer.c) and the GGUF paths
 * of the CLI (train/eval, inspect, tokenize).
 *   - tok-qwen2style.gguf / tok-llama3style.gguf (scripts/gguf_fixtures.py: the fixtures' tokenizer.json
 *     written as llama.cpp's converter writes it) encode every text of golden_dev.json to the same ids as
 *     the tokenizer.json the pre-tokenizer name stands for; tok-smollm2.gguf encodes and decodes as
 *     Hugging Face tokenizers does SmolLM2's tokenizer.json (exact ids, no tolerance);
 *   - each tokenizer.ggml.pre name becomes the documented normalizer / pre-tokenizer, token types become
 *     vocabulary, special and non-special added tokens, unused fillers are dropped;
 *   - eos / pad ids and the chat template's name come from the metadata;
 *   - unsupported tokenizers are one-line errors pointing to data.tokenizer;
 *   - `qlora-train eval` on a GGUF model (with a PEFT adapter) prints the golden loss of its safetensors
 *     original; eval, generate, inspect and tokenize read a .gguf file's tokenizer. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "data/chat_template.h"
#include "formats/gguf.h"
#include "formats/gguf_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

static char *gguf_fixture(const char *file) {
    char *p = NULL;
    if (asprintf(&p, "%s/gguf/%s", QLT_TEST_DATA, file) < 0) abort();
    return p;
}

/* The fixture's tokenizer.json with its normalizer and ignore_merges set as given, loaded. */
static qlt_tokenizer *reference_tokenizer(const char *fixture, int keep_normalizer, int ignore_merges) {
    char *path = test_fixture_path(fixture, "tokenizer.json"), *text;
    cr_assert_eq(qlt_read_file(path, &text, NULL), 0, "%s", qlt_error());
    cJSON *root = cJSON_Parse(text);
    cr_assert(root);
    if (!keep_normalizer) cJSON_ReplaceItemInObject(root, "normalizer", cJSON_CreateNull());
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model"), "ignore_merges", cJSON_CreateBool(ignore_merges));
    char *json = cJSON_PrintUnformatted(root);
    qlt_tokenizer *tok;
    cr_assert_eq(qlt_tokenizer_load_json(&tok, json, strlen(json), path), 0, "%s", qlt_error());
    cJSON_Delete(root);
    free(json);
    free(text);
    free(path);
    return tok;
}

/* Every golden_dev text encodes to the same ids with both tokenizers, and the ids decode to the same text. */
static void expect_same_encoding(const qlt_tokenizer *a, const qlt_tokenizer *ref, const char *fixture) {
    char *path = test_fixture_path(fixture, "golden_dev.json"), *text;
    cr_assert_eq(qlt_read_file(path, &text, NULL), 0, "%s", qlt_error());
    cJSON *cases = cJSON_Parse(text);
    cr_assert(cJSON_IsArray(cases));
    int n = 0;
    for (const cJSON *c = cases->child; c; c = c->next, n++) {
        const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
        qlt_ids x = {0}, y = {0};
        cr_assert_eq(qlt_tokenizer_encode(a, s, strlen(s), &x), 0, "%s", qlt_error());
        cr_assert_eq(qlt_tokenizer_encode(ref, s, strlen(s), &y), 0, "%s", qlt_error());
        int same = x.len == y.len && (x.len == 0 || memcmp(x.data, y.data, sizeof(int32_t) * (size_t)x.len) == 0);
        cr_expect(same, "%s: \"%s\" encodes differently (%lld vs %lld ids)", fixture, s, (long long)x.len,
                  (long long)y.len);
        char *back, *ref_back;
        size_t len, ref_len;
        cr_assert_eq(qlt_tokenizer_decode(a, x.data, x.len, &back, &len), 0, "%s", qlt_error());
        cr_assert_eq(qlt_tokenizer_decode(ref, x.data, x.len, &ref_back, &ref_len), 0, "%s", qlt_error());
        cr_expect(len == ref_len && memcmp(back, ref_back, len) == 0, "%s: \"%s\" decodes to \"%s\", not \"%s\"",
                  fixture, s, back, ref_back);
        free(back);
        free(ref_back);
        qlt_ids_free(&x);
        qlt_ids_free(&y);
    }
    cr_expect(n >= 10, "%s: only %d golden texts", fixture, n);
    cJSON_Delete(cases);
    free(text);
    free(path);
}

/* pre "qwen2": NFC, Qwen2's regex, merges applied: the fixture's tokenizer.json as it is. */
Test(gguf_tokenizer, qwen2_encodes_as_tokenizer_json) {
    char *path = gguf_fixture("tok-qwen2style.gguf");
    qlt_tokenizer *tok, *ref = reference_tokenizer("tok-qwen2style", 1, 0);
    cr_assert_eq(qlt_gguf_tokenizer_load_file(&tok, path), 0, "%s", qlt_error());
    expect_same_encoding(tok, ref, "tok-qwen2style");
    cr_expect_eq(qlt_tokenizer_n_ids(tok), qlt_tokenizer_n_ids(ref));
    cr_expect_eq(qlt_tokenizer_eos_id(tok), 3000, "eos <|endoftext|>");
    cr_expect_eq(qlt_tokenizer_pad_id(tok), 3002, "pad: tokenizer.ggml.padding_token_id (<|im_end|>)");
    cr_expect_str_eq(qlt_tokenizer_chat_template(tok), "chatml");
    qlt_chat_template t;
    cr_expect_eq(qlt_chat_template_resolve(QLT_CHAT_TEMPLATE_AUTO, tok, &t), 0, "%s", qlt_error());
    cr_expect_eq(t, QLT_CHAT_TEMPLATE_CHATML);
    qlt_tokenizer_free(tok);
    qlt_tokenizer_free(ref);
    free(path);
}

/* pre "llama-bpe": Llama-3's regex, no normalizer, ignore_merges (as Llama-3's tokenizer.json). */
Test(gguf_tokenizer, llama_bpe_encodes_as_llama3_tokenizer_json) {
    char *path = gguf_fixture("tok-llama3style.gguf");
    qlt_tokenizer *tok, *ref = reference_tokenizer("tok-llama3style", 0, 1);
    cr_assert_eq(qlt_gguf_tokenizer_load_file(&tok, path), 0, "%s", qlt_error());
    expect_same_encoding(tok, ref, "tok-llama3style");
    cr_expect_str_eq(qlt_tokenizer_chat_template(tok), "llama3");
    /* the template names llama3, whose tokens this small vocabulary lacks: auto says so */
    qlt_chat_template t;
    cr_expect_eq(qlt_chat_template_resolve(QLT_CHAT_TEMPLATE_AUTO, tok, &t), -1);
    cr_expect(strstr(qlt_error(), "llama3 needs the token <|begin_of_text|>"), "%s", qlt_error());
    qlt_tokenizer_free(tok);
    qlt_tokenizer_free(ref);
    free(path);
}

/* pre "smollm": Digits one by one, then ByteLevel with GPT-2's regex. Against Hugging Face tokenizers'
 * own encodings and decodings of SmolLM2's (cut-down) tokenizer.json (tok-smollm2/golden-smollm2.json),
 * id for id. */
Test(gguf_tokenizer, smollm_encodes_as_huggingface) {
    char *path = gguf_fixture("tok-smollm2.gguf"), *gpath = test_fixture_path("tok-smollm2", "golden-smollm2.json");
    qlt_tokenizer *tok;
    cr_assert_eq(qlt_gguf_tokenizer_load_file(&tok, path), 0, "%s", qlt_error());
    char *text;
    cr_assert_eq(qlt_read_file(gpath, &text, NULL), 0, "%s", qlt_error());
    cJSON *golden = cJSON_Parse(text);
    cr_assert(golden);
    int n_enc = 0, n_dec = 0;
    for (const cJSON *c = cJSON_GetObjectItem(golden, "encode")->child; c; c = c->next, n_enc++) {
        const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        qlt_ids ids = {0};
        cr_assert_eq(qlt_tokenizer_encode(tok, s, strlen(s), &ids), 0, "%s", qlt_error());
        int same = ids.len == cJSON_GetArraySize(want);
        int64_t k = 0;
        for (const cJSON *v = want->child; v && same; v = v->next, k++) same = ids.data[k] == v->valueint;
        cr_expect(same, "\"%.60s\": %lld ids, Hugging Face %d (first difference at %lld)", s, (long long)ids.len,
                  cJSON_GetArraySize(want), (long long)k - 1);
        qlt_ids_free(&ids);
    }
    for (const cJSON *c = cJSON_GetObjectItem(golden, "decode")->child; c; c = c->next, n_dec++) {
        const cJSON *in = cJSON_GetObjectItem(c, "ids");
        int64_t n = cJSON_GetArraySize(in), k = 0;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        for (const cJSON *v = in->child; v; v = v->next) ids[k++] = v->valueint;
        char *out;
        size_t len;
        cr_assert_eq(qlt_tokenizer_decode(tok, ids, n, &out, &len), 0, "%s", qlt_error());
        const char *want = cJSON_GetObjectItem(c, "text")->valuestring;
        cr_expect(len == strlen(want) && memcmp(out, want, len) == 0, "decode %d: \"%s\" vs \"%s\"", n_dec, out, want);
        free(out);
        free(ids);
    }
    cr_expect(n_enc >= 20 && n_dec >= 20, "%d encodings, %d decodings", n_enc, n_dec);
    cr_expect_eq(qlt_tokenizer_eos_id(tok), 0, "eos <|endoftext|> (by name, as with the tokenizer.json)");
    cr_expect_eq(qlt_tokenizer_pad_id(tok), 2, "pad <|im_end|> (tokenizer.ggml.padding_token_id)");
    cr_expect_str_eq(qlt_tokenizer_chat_template(tok), "chatml");
    cJSON_Delete(golden);
    free(text);
    free(gpath);
    free(path);
    qlt_tokenizer_free(tok);
}

/* ---- synthetic tokenizer metadata ---- */

typedef struct gbuf {
    uint8_t *p;
    size_t n, cap;
} gbuf;

static void put(gbuf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void put_u32(gbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(gbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_strn(gbuf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void put_str(gbuf *b, const char *s) { put_strn(b, s, strlen(s)); }
static void kv_str(gbuf *b, const char *key, const char *v) {
    put_str(b, key);
    put_u32(b, QLT_GGUF_VAL_STRING);
    put_str(b, v);
}

/* Token ids of the synthetic vocabulary: the 256 byte tokens in byte order, then these. */
enum { ID_AB = 256, ID_EOS, ID_USER, ID_PAD, N_TOKENS };

/* A GGUF holding only tokenizer metadata: model `model`, pre `pre` (NULL: no key), the 256 byte tokens,
 * "ab" (merge "a b"), <|endoftext|> (CONTROL), "<user>" (USER_DEFINED), "[PAD259]" (UNUSED); eos 257,
 * padding 259; written to a temp file whose path is returned (*dir_out to remove). */
static char *write_tokenizer_gguf(const char *model, const char *pre, char **dir_out) {
    gbuf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, pre ? 8 : 7);
    kv_str(&b, "general.architecture", "llama");
    kv_str(&b, "tokenizer.ggml.model", model);
    if (pre) kv_str(&b, "tokenizer.ggml.pre", pre);
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, QLT_GGUF_VAL_ARRAY);
    put_u32(&b, QLT_GGUF_VAL_STRING);
    put_u64(&b, N_TOKENS);
    for (int i = 0; i < 256; i++) {
        uint8_t raw = (uint8_t)i;
        char s[8];
        size_t n = qlt_byte_level_encode(&raw, 1, s);
        put_strn(&b, s, n);
    }
    put_str(&b, "ab");
    put_str(&b, "<|endoftext|>");
    put_str(&b, "<user>");
    put_str(&b, "[PAD259]");
    put_str(&b, "tokenizer.ggml.token_type");
    put_u32(&b, QLT_GGUF_VAL_ARRAY);
    put_u32(&b, QLT_GGUF_VAL_I32);
    put_u64(&b, N_TOKENS);
    for (int i = 0; i < N_TOKENS; i++) put_u32(&b, i == ID_EOS ? 3 : i == ID_USER ? 4 : i == ID_PAD ? 5 : 1);
    put_str(&b, "tokenizer.ggml.merges");
    put_u32(&b, QLT_GGUF_VAL_ARRAY);
    put_u32(&b, QLT_GGUF_VAL_STRING);
    put_u64(&b, 1);
    put_str(&b, "a b");
    put_str(&b, "tokenizer.ggml.eos_token_id");
    put_u32(&b, QLT_GGUF_VAL_U32);
    put_u32(&b, ID_EOS);
    put_str(&b, "tokenizer.ggml.padding_token_id");
    put_u32(&b, QLT_GGUF_VAL_U32);
    put_u32(&b, ID_PAD);
    *dir_out = test_tmpdir();
    char *path = qlt_path_join(*dir_out, "tok.gguf");
    test_write_bytes(path, b.p, b.n);
    free(b.p);
    return path;
}

/* The tokenizer.json and tokenizer_config.json a pre name gives (parsed; caller frees). */
static void tokenizer_json_for(const char *pre, cJSON **json, cJSON **config) {
    char *dir, *path = write_tokenizer_gguf("gpt2", pre, &dir);
    qlt_gguf g;
    cr_assert_eq(qlt_gguf_open(&g, path), 0, "%s", qlt_error());
    char *text, *cfg;
    cr_assert_eq(qlt_gguf_tokenizer_json(&g, &text, &cfg), 0, "%s", qlt_error());
    *json = cJSON_Parse(text);
    *config = cJSON_Parse(cfg);
    cr_assert(*json && *config);
    free(text);
    free(cfg);
    qlt_gguf_close(&g);
    qlt_remove_tree(dir);
    free(dir);
    free(path);
}

static const char *str_at(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

Test(gguf_tokenizer, pre_names_map_to_pre_tokenizers) {
    cJSON *j, *c;
    /* gpt2, default and no key: ByteLevel with its own (GPT-2) regex, no normalizer */
    const char *plain[] = {"gpt2", "default", NULL};
    for (int i = 0; i < 3; i++) {
        tokenizer_json_for(plain[i], &j, &c);
        const cJSON *p = cJSON_GetObjectItem(j, "pre_tokenizer");
        cr_expect_str_eq(str_at(p, "type"), "ByteLevel", "pre %s", plain[i] ? plain[i] : "(none)");
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(p, "use_regex")));
        cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "normalizer")));
        cJSON_Delete(j);
        cJSON_Delete(c);
    }
    /* smollm: Digits (individual), then ByteLevel with the GPT-2 regex */
    tokenizer_json_for("smollm", &j, &c);
    const cJSON *seq = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pre_tokenizer"), "pretokenizers");
    cr_assert(cJSON_GetArraySize(seq) == 2);
    cr_expect_str_eq(str_at(cJSON_GetArrayItem(seq, 0), "type"), "Digits");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(seq, 0), "individual_digits")));
    cr_expect_str_eq(str_at(cJSON_GetArrayItem(seq, 1), "type"), "ByteLevel");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(seq, 1), "use_regex")));
    cJSON_Delete(j);
    cJSON_Delete(c);
    /* llama-bpe / llama3: Llama-3's Split regex (digits in threes), ignore_merges; qwen2: NFC, digits alone */
    const char *split[] = {"llama-bpe", "llama3", "qwen2"};
    for (int i = 0; i < 3; i++) {
        tokenizer_json_for(split[i], &j, &c);
        seq = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pre_tokenizer"), "pretokenizers");
        const cJSON *s0 = cJSON_GetArrayItem(seq, 0);
        cr_expect_str_eq(str_at(s0, "type"), "Split", "%s", split[i]);
        const char *re = str_at(cJSON_GetObjectItem(s0, "pattern"), "Regex");
        int qwen = i == 2;
        cr_expect(strstr(re, qwen ? "|\\p{N}|" : "\\p{N}{1,3}") != NULL, "%s: %s", split[i], re);
        cr_expect(!cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(seq, 1), "use_regex")));
        cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "ignore_merges")), !qwen);
        cr_expect_str_eq(qwen ? str_at(cJSON_GetObjectItem(j, "normalizer"), "type") : "NFC", "NFC");
        cJSON_Delete(j);
        cJSON_Delete(c);
    }
}

/* NORMAL tokens form the vocabulary, CONTROL / USER_DEFINED the added tokens (special or not; in the
 * vocabulary too), UNUSED fillers are dropped; eos / pad become tokenizer_config.json's eos_token /
 * pad_token. */
Test(gguf_tokenizer, token_types_and_special_ids) {
    cJSON *j, *c;
    tokenizer_json_for("gpt2", &j, &c);
    const cJSON *vocab = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "vocab");
    cr_expect_eq(cJSON_GetArraySize(vocab), 259, "256 byte tokens, \"ab\" and the two added tokens");
    cr_expect_eq(cJSON_GetObjectItem(vocab, "ab")->valueint, ID_AB);
    cr_expect_eq(cJSON_GetObjectItem(vocab, "<user>")->valueint, ID_USER);
    cr_expect(cJSON_GetObjectItem(vocab, "[PAD259]") == NULL, "unused fillers are not in the vocabulary");
    const cJSON *added = cJSON_GetObjectItem(j, "added_tokens");
    cr_assert_eq(cJSON_GetArraySize(added), 2);
    cr_expect_str_eq(str_at(cJSON_GetArrayItem(added, 0), "content"), "<|endoftext|>");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(added, 0), "special")));
    cr_expect_str_eq(str_at(cJSON_GetArrayItem(added, 1), "content"), "<user>");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(added, 1), "special")));
    cr_expect_str_eq(str_at(c, "eos_token"), "<|endoftext|>");
    cr_expect_str_eq(str_at(c, "pad_token"), "[PAD259]");
    cJSON_Delete(j);
    cJSON_Delete(c);
    /* loaded: "ab" merges, added tokens are cut out first, the unused filler id is not a token */
    char *dir, *path = write_tokenizer_gguf("gpt2", "gpt2", &dir);
    qlt_tokenizer *tok;
    cr_assert_eq(qlt_gguf_tokenizer_load_file(&tok, path), 0, "%s", qlt_error());
    qlt_ids ids = {0};
    const char *text = "ab<user>b<|endoftext|>";
    cr_assert_eq(qlt_tokenizer_encode(tok, text, strlen(text), &ids), 0, "%s", qlt_error());
    const int32_t want[] = {ID_AB, ID_USER, 'b', ID_EOS};
    cr_expect(ids.len == 4 && memcmp(ids.data, want, sizeof want) == 0, "got %lld ids", (long long)ids.len);
    cr_expect_eq(qlt_tokenizer_eos_id(tok), ID_EOS);
    cr_expect_eq(qlt_tokenizer_token_id(tok, "[PAD259]"), -1);
    cr_expect_eq(qlt_tokenizer_pad_id(tok), ID_EOS, "pad falls back to eos: the padding id names an unused token");
    qlt_ids_free(&ids);
    qlt_tokenizer_free(tok);
    qlt_remove_tree(dir);
    free(dir);
    free(path);
}

static void expect_tokenizer_error(const char *model, const char *pre, const char *needle) {
    char *dir, *path = write_tokenizer_gguf(model, pre, &dir);
    qlt_tokenizer *tok;
    cr_expect_eq(qlt_gguf_tokenizer_load_file(&tok, path), -1);
    cr_expect(strstr(qlt_error(), path) && strstr(qlt_error(), needle) && strstr(qlt_error(), "data.tokenizer") &&
                  !strchr(qlt_error(), '\n'),
              "%s", qlt_error());
    qlt_remove_tree(dir);
    free(dir);
    free(path);
}

Test(gguf_tokenizer, unsupported_tokenizers_are_one_line_errors) {
    expect_tokenizer_error("llama", "default", "tokenizer.ggml.model is \"llama\"");
    expect_tokenizer_error("gpt2", "falcon", "tokenizer.ggml.pre \"falcon\" is not supported");
    char *path = gguf_fixture("types.gguf");
    qlt_tokenizer *tok;
    cr_expect_eq(qlt_gguf_tokenizer_load_file(&tok, path), -1);
    cr_expect(strstr(qlt_error(), "no tokenizer in the file") && strstr(qlt_error(), "data.tokenizer"), "%s",
              qlt_error());
    free(path);
}

/* ---- the CLI on GGUF files ---- */

/* eval on the F32 GGUF of tiny-llama with its PEFT adapter-init gives the golden first loss, as eval on
 * the safetensors directory does (test_bad_input.c, cli/eval_prints_golden_loss; relative 1e-5). */
Test(gguf_cli, eval_gguf_model_prints_golden_loss) {
    const double golden = 6.114551067352295;
    char *dir = test_tmpdir(), *fixture = test_fixture_path("tiny-llama", NULL), *model = gguf_fixture("tiny-llama.f32.gguf");
    char *tokens = qlt_path_join(dir, "eval.jsonl"), *cfg = qlt_path_join(dir, "eval.yaml");
    int seq;
    test_write_golden_tokens("tiny-llama", tokens, NULL, &seq);
    char *text = NULL, *args = NULL, *out = NULL;
    if (asprintf(&text,
                 "model: {path: %s, quant: none}\nlora: {init_from: %s/adapter-init}\n"
                 "data: {eval: [%s], format: tokens, seq_len: %d, packing: false, cache: false}\n"
                 "train: {device: cpu, micro_batch: 2}\noutput: {dir: %s/out}\n",
                 model, fixture, tokens, seq, dir) < 0)
        abort();
    test_write_text(cfg, text);
    if (asprintf(&args, "eval --config %s", cfg) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    char *k = strstr(out, "{\"loss\": ");
    cr_assert(k, "%s", out);
    double loss = strtod(k + 9, NULL);
    cr_expect(loss > 0 && fabs(loss - golden) / golden < 1e-5, "eval loss %.9f vs golden %.9f", loss, golden);
    free(out);
    /* a text format needs a tokenizer: the GGUF's own, which this file's placeholder token list is not */
    free(args);
    if (asprintf(&args, "eval --config %s --set data.format=text", cfg) < 0) abort();
    cr_expect_eq(test_run_cli(NULL, args, &out), 1, "%s", out);
    cr_expect(strstr(out, "the tokenizer of model.path") && strstr(out, "tokenizer.ggml.merges"), "%s", out);
    /* generate takes the same tokenizer */
    free(out);
    free(args);
    if (asprintf(&args, "generate --config %s --prompt x --max-new-tokens 2 --raw", cfg) < 0) abort();
    cr_expect_eq(test_run_cli(NULL, args, &out), 1, "%s", out);
    cr_expect(strstr(out, "the tokenizer of model.path") && strstr(out, "tokenizer.ggml.merges"), "%s", out);
    qlt_remove_tree(dir);
    free(dir);
    free(fixture);
    free(model);
    free(tokens);
    free(cfg);
    free(text);
    free(args);
    free(out);
}

Test(gguf_cli, inspect_and_tokenize_read_gguf) {
    char *model = gguf_fixture("tiny-llama.q4_1.gguf"), *args = NULL, *out = NULL;
    if (asprintf(&args, "inspect %s --check", model) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "architecture: LlamaForCausalLM (general.architecture llama)  layers 3  hidden 96  heads 6 / "
                          "kv 2  head_dim 16"), "%s", out);
    cr_expect(strstr(out, "blk.2.ffn_down.weight") && strstr(out, "Q4_1   [96, 256]"), "%s", out);
    cr_expect(strstr(out, "token_embd.weight") && strstr(out, "Q8_0   [384, 96]"), "%s", out);
    cr_expect(strstr(out, "every value of the"), "%s", out);
    free(args);
    free(out);
    char *tok = gguf_fixture("tok-qwen2style.gguf"), *json = test_fixture_path("tok-qwen2style", "tokenizer.json");
    char *a = NULL, *b = NULL, *dir = test_tmpdir(), *input = qlt_path_join(dir, "in.txt");
    test_write_text(input, "\"Hello, world! 12345 <|im_start|>\"\n");
    if (asprintf(&args, "tokenize --tokenizer %s < %s", tok, input) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &a), 0, "%s", a);
    free(args);
    if (asprintf(&args, "tokenize --tokenizer %s < %s", json, input) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &b), 0, "%s", b);
    cr_expect_str_eq(a, b);
    cr_expect(strstr(a, ",3001]"), "%s", a);
    free(args);
    free(a);
    free(b);
    qlt_remove_tree(dir);
    free(dir);
    free(input);
    free(tok);
    free(json);
    free(model);
}
