/* test_tokenizer_formats.c: the tokenizer beyond Qwen / Llama-3 equals Hugging Face tokenizers (0.23) id
 * for id, encoding and decoding:
 *   - SentencePiece-style BPE (tests/data/fixtures/tok-mistral: Mistral-7B's vocabulary, cut down) in
 *     every variant scripts/tokenizer_goldens.py made: the Prepend + Replace normalizers, Metaspace with
 *     each prepend_scheme and split, byte_fallback, unk_token fused or not, ignore_merges, and the
 *     Replace / ByteFallback / Fuse / Strip / Metaspace decoders (or none);
 *   - SmolLM2's byte-level vocabulary (tok-smollm2), which lacks 21 of the 256 byte tokens: Digits in a
 *     Sequence with ByteLevel (and with Split), digits one by one and in runs, a missing byte dropped or
 *     made the unknown token; Split in each behavior, inverted or not;
 * plus small hand-made cases that pin each rule on its own, and the refusals of what is not supported. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

static cJSON *read_json(const char *path) {
    char *data;
    size_t len;
    cr_assert_eq(qlt_read_file(path, &data, &len), 0, "%s", qlt_error());
    cJSON *j = cJSON_ParseWithLength(data, len);
    free(data);
    cr_assert_not_null(j, "%s: bad JSON", path);
    return j;
}

/* The base tokenizer.json with a golden file's overrides applied (top-level keys replaced whole, keys
 * under "model" one by one), as scripts/tokenizer_goldens.py applies them. */
static qlt_tokenizer *load_variant(const cJSON *base, const cJSON *overrides, const char *name) {
    cJSON *tok = cJSON_Duplicate(base, 1);
    for (const cJSON *o = overrides ? overrides->child : NULL; o; o = o->next) {
        if (strcmp(o->string, "model") == 0) {
            cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
            for (const cJSON *m = o->child; m; m = m->next) {
                cJSON_DeleteItemFromObjectCaseSensitive(model, m->string);
                cJSON_AddItemToObject(model, m->string, cJSON_Duplicate(m, 1));
            }
        } else {
            cJSON_DeleteItemFromObjectCaseSensitive(tok, o->string);
            cJSON_AddItemToObject(tok, o->string, cJSON_Duplicate(o, 1));
        }
    }
    char *text = cJSON_PrintUnformatted(tok);
    qlt_tokenizer *t;
    cr_assert_eq(qlt_tokenizer_load_json(&t, text, strlen(text), name), 0, "%s", qlt_error());
    free(text);
    cJSON_Delete(tok);
    return t;
}

static void expect_ids(const qlt_ids *got, const cJSON *want, const char *what, const char *text) {
    cr_assert_eq(got->len, cJSON_GetArraySize(want), "%s: \"%s\": %lld ids, want %d", what, text, (long long)got->len,
                 cJSON_GetArraySize(want));
    int64_t i = 0;
    for (const cJSON *w = want->child; w; w = w->next, i++)
        cr_assert_eq(got->data[i], w->valueint, "%s: \"%s\": id %lld is %d, want %d", what, text, (long long)i,
                     got->data[i], w->valueint);
}

/* Decodes the JSON array of ids `ids` and expects `want`. */
static void expect_decoded(const qlt_tokenizer *tok, const cJSON *ids, const char *want, const char *what) {
    int n = cJSON_GetArraySize(ids);
    int32_t *v = malloc(((size_t)n + 1) * sizeof *v);
    int k = 0;
    for (const cJSON *x = ids->child; x; x = x->next) v[k++] = x->valueint;
    char *text;
    size_t len;
    cr_assert_eq(qlt_tokenizer_decode(tok, v, n, &text, &len), 0, "%s", qlt_error());
    cr_assert_str_eq(text, want, "%s: decode gave \"%s\", tokenizers \"%s\"", what, text, want);
    cr_assert_eq(len, strlen(want));
    free(text);
    free(v);
}

/* Every encoding and decoding of fixtures/<folder>/golden-<variant>.json. */
static void check_variant(const char *folder, const char *variant) {
    char path[1024], what[256];
    snprintf(path, sizeof path, QLT_TEST_DATA "/fixtures/%s/tokenizer.json", folder);
    cJSON *base = read_json(path);
    snprintf(path, sizeof path, QLT_TEST_DATA "/fixtures/%s/golden-%s.json", folder, variant);
    cJSON *golden = read_json(path);
    snprintf(what, sizeof what, "%s/%s", folder, variant);
    qlt_tokenizer *tok = load_variant(base, cJSON_GetObjectItem(golden, "overrides"), what);
    qlt_encoder *enc = qlt_encoder_new(tok);
    int n_encode = 0, n_decode = 0;
    for (const cJSON *c = cJSON_GetObjectItem(golden, "encode")->child; c; c = c->next, n_encode++) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        qlt_ids ids = {0};
        cr_assert_eq(qlt_encoder_encode(enc, text, strlen(text), &ids), 0, "%s", qlt_error());
        expect_ids(&ids, cJSON_GetObjectItem(c, "ids"), what, text);
        expect_decoded(tok, cJSON_GetObjectItem(c, "ids"), cJSON_GetObjectItem(c, "decoded")->valuestring, what);
        qlt_ids_free(&ids);
    }
    for (const cJSON *c = cJSON_GetObjectItem(golden, "decode")->child; c; c = c->next, n_decode++)
        expect_decoded(tok, cJSON_GetObjectItem(c, "ids"), cJSON_GetObjectItem(c, "text")->valuestring, what);
    cr_assert_gt(n_encode, 40);
    cr_assert_gt(n_decode, 30);
    qlt_encoder_free(enc);
    qlt_tokenizer_free(tok);
    cJSON_Delete(golden);
    cJSON_Delete(base);
}

#define GOLDEN(folder, variant, test_name) \
    Test(tokenizer_formats, test_name) { check_variant(folder, variant); }

GOLDEN("tok-mistral", "mistral", mistral_as_shipped)
GOLDEN("tok-mistral", "metaspace-first", metaspace_first)
GOLDEN("tok-mistral", "metaspace-always-split", metaspace_always_split)
GOLDEN("tok-mistral", "metaspace-never-split", metaspace_never_split)
GOLDEN("tok-mistral", "metaspace-first-decoder", metaspace_first_decoder)
GOLDEN("tok-mistral", "gemma-style", gemma_style_replace_normalizer)
GOLDEN("tok-mistral", "digits-metaspace", digits_then_metaspace)
GOLDEN("tok-mistral", "unk-fused", unk_fused_without_byte_fallback)
GOLDEN("tok-mistral", "unk-unfused", unk_unfused_without_byte_fallback)
GOLDEN("tok-mistral", "ignore-merges", sentencepiece_ignore_merges)
GOLDEN("tok-mistral", "strip-three", strip_decoder_three)
GOLDEN("tok-mistral", "no-decoder", no_decoder_joins_with_spaces)
GOLDEN("tok-mistral", "split-behaviors", split_inverted_merged_with_previous)
GOLDEN("tok-mistral", "split-merged-with-next", split_merged_with_next)
GOLDEN("tok-smollm2", "smollm2", smollm2_as_shipped)
GOLDEN("tok-smollm2", "digits-runs", digits_in_runs)
GOLDEN("tok-smollm2", "split-digits-bytelevel", split_then_digits_then_bytelevel)
GOLDEN("tok-smollm2", "prefix-space", bytelevel_prefix_space_per_piece)
GOLDEN("tok-smollm2", "unk", missing_byte_as_unk)
GOLDEN("tok-smollm2", "unk-fused", missing_bytes_as_fused_unk)
GOLDEN("tok-smollm2", "nfkc", smollm2_with_nfkc)
GOLDEN("tok-smollm2", "split-behaviors", split_merged_contiguous_removed)

/* ---- small hand-made tokenizers: one rule each ---- */

/* A tokenizer.json around a model object and the given pipeline parts (JSON text, or "null"). */
static qlt_tokenizer *tiny(const char *model, const char *normalizer, const char *pre, const char *decoder) {
    char json[8192];
    snprintf(json, sizeof json,
             "{\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"special\": true, \"normalized\": false}],"
             " \"normalizer\": %s, \"pre_tokenizer\": %s, \"decoder\": %s, \"model\": %s}",
             normalizer, pre, decoder, model);
    qlt_tokenizer *tok;
    cr_assert_eq(qlt_tokenizer_load_json(&tok, json, strlen(json), "tiny"), 0, "%s", qlt_error());
    return tok;
}

static void expect_encode(const qlt_tokenizer *tok, const char *text, const int32_t *want, int n) {
    qlt_ids ids = {0};
    cr_assert_eq(qlt_tokenizer_encode(tok, text, strlen(text), &ids), 0, "%s", qlt_error());
    cr_assert_eq(ids.len, n, "\"%s\": %lld ids, want %d", text, (long long)ids.len, n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(ids.data[i], want[i], "\"%s\": id %d is %d, want %d", text, i, ids.data[i], want[i]);
    qlt_ids_free(&ids);
}

static void expect_decode(const qlt_tokenizer *tok, const int32_t *ids, int n, const char *want) {
    char *text;
    size_t len;
    cr_assert_eq(qlt_tokenizer_decode(tok, ids, n, &text, &len), 0, "%s", qlt_error());
    cr_assert_str_eq(text, want);
    free(text);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (int)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

/* Byte-level vocabulary without the tokens of 'x' and byte 0x04: such a byte is dropped, and the bytes
 * either side then merge as if adjacent (what tokenizers does: "axb" -> "ab"); with an unk_token it is
 * that token instead. */
Test(tokenizer_formats, byte_level_missing_byte_is_dropped_or_unk) {
    const char *vocab = "{\"a\": 0, \"<s>\": 1, \"b\": 2, \"ab\": 3, \"\\u0120\": 4}";
    char model[1024];
    snprintf(model, sizeof model, "{\"type\": \"BPE\", \"vocab\": %s, \"merges\": [\"a b\"]}", vocab);
    const char *bl = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}";
    qlt_tokenizer *tok = tiny(model, "null", bl, bl);
    expect_encode(tok, "axb", IDS(3));
    expect_encode(tok, "a\x04x\x04" "b", IDS(0, 2)); /* words a | \x04 | x | \x04 | b: three of them vanish */
    expect_encode(tok, "x", NULL, 0);
    expect_decode(tok, IDS(0, 4, 2), "a b");
    qlt_tokenizer_free(tok);
    snprintf(model, sizeof model, "{\"type\": \"BPE\", \"unk_token\": \"<s>\", \"vocab\": %s, \"merges\": [\"a b\"]}",
             vocab);
    tok = tiny(model, "null", bl, bl);
    expect_encode(tok, "axb", IDS(0, 1, 2));
    expect_encode(tok, "xxb", IDS(1, 1, 2));
    qlt_tokenizer_free(tok);
    snprintf(model, sizeof model,
             "{\"type\": \"BPE\", \"unk_token\": \"<s>\", \"fuse_unk\": true, \"vocab\": %s, \"merges\": [\"a b\"]}", vocab);
    tok = tiny(model, "null", bl, bl);
    expect_encode(tok, "xxb", IDS(1, 2));
    qlt_tokenizer_free(tok);
}

/* SentencePiece style: a character without a token becomes its <0xNN> tokens; a run of byte tokens
 * that is not valid UTF-8 decodes to one U+FFFD per byte (not one per invalid sequence). */
Test(tokenizer_formats, byte_fallback_and_its_decoding) {
    const char *model = "{\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\", \"fuse_unk\": true,"
                        " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"<0xC3>\": 2, \"<0xA9>\": 3, \"\\u2581\": 4, \"a\": 5,"
                        " \"\\u2581a\": 6}, \"merges\": [\"\\u2581 a\"]}";
    const char *norm = "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"},"
                       " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]}";
    const char *dec = "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
                      "\"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
                      " {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}";
    qlt_tokenizer *tok = tiny(model, norm, "null", dec);
    expect_encode(tok, "a\xc3\xa9", IDS(6, 2, 3));     /* é has no token: its two bytes */
    expect_encode(tok, "\xe2\x82\xac", IDS(4, 0));     /* € has neither token nor byte tokens: <unk> */
    expect_encode(tok, "a<s>a", IDS(6, 1, 6));         /* Prepend works per segment between added tokens */
    expect_decode(tok, IDS(6, 2, 3), "a\xc3\xa9");
    expect_decode(tok, IDS(2, 3, 2, 5), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "a");
    expect_decode(tok, IDS(6, 1, 6), "a<s> a");         /* the added token goes through the chain too */
    qlt_tokenizer_free(tok);
}

/* Digits: numeric characters by Unicode category (², ½, Ⅻ, Arabic-Indic digits), isolated one by one or
 * in runs; the other text between them is left whole. Checked through a Metaspace "first" after it: the
 * prepended mark goes on the piece that starts the input only. */
Test(tokenizer_formats, digits_pieces) {
    const char *model = "{\"type\": \"BPE\", \"vocab\": {\"\\u2581\": 0, \"<s>\": 1, \"1\": 2, \"2\": 3, \"12\": 4,"
                        " \"\\u00b2\": 5, \"a\": 6, \"\\u2581a\": 7}, \"merges\": [\"1 2\", \"\\u2581 a\"]}";
    const char *ms = "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", \"split\": true}";
    char pre[512];
    snprintf(pre, sizeof pre, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
             "\"individual_digits\": true}, %s]}", ms);
    qlt_tokenizer *tok = tiny(model, "null", pre, ms);
    expect_encode(tok, "12a", IDS(0, 2, 3, 6));        /* ▁1 has no token: ▁, 1; then 2; a */
    expect_encode(tok, "a12\xc2\xb2", IDS(7, 2, 3, 5));
    qlt_tokenizer_free(tok);
    snprintf(pre, sizeof pre, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
             "\"individual_digits\": false}, %s]}", ms);
    tok = tiny(model, "null", pre, ms);
    expect_encode(tok, "a12\xc2\xb2", IDS(7, 4, 5));   /* "12²" one piece: 12 merges, ² stays */
    expect_decode(tok, IDS(0, 0, 7), "  a");           /* Metaspace decoder drops the mark in token 0 only */
    qlt_tokenizer_free(tok);
}

static void expect_load_json_error(const char *json, const char *needle) {
    qlt_tokenizer *tok = (qlt_tokenizer *)1;
    qlt_error_clear();
    cr_assert_eq(qlt_tokenizer_load_json(&tok, json, strlen(json), "my/tokenizer.json"), -1, "should fail: %s", needle);
    cr_assert_null(tok);
    cr_assert(strstr(qlt_error(), needle), "error \"%s\" should mention \"%s\"", qlt_error(), needle);
    cr_assert(strstr(qlt_error(), "my/tokenizer.json"), "error \"%s\" should name the file", qlt_error());
}

/* What is not supported is refused at load, naming the file and the part. */
Test(tokenizer_formats, unsupported_parts_are_refused) {
#define MODEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}"
    expect_load_json_error("{\"normalizer\": {\"type\": \"Lowercase\"}, " MODEL "}", "normalizer type \"Lowercase\"");
    expect_load_json_error("{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}, \"content\": \" \"}, "
                           MODEL "}", "Regex pattern is not supported");
    expect_load_json_error("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, " MODEL "}", "pre_tokenizer type \"Whitespace\"");
    expect_load_json_error("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, "
                           "{\"type\": \"Digits\"}]}, " MODEL "}", "Digits after ByteLevel");
    expect_load_json_error("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "
                           "\"behavior\": \"Sometimes\"}, " MODEL "}", "Split behavior \"Sometimes\"");
    expect_load_json_error("{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"ab\"}, " MODEL "}",
                           "not one character");
    expect_load_json_error("{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"prepend_scheme\": \"sometimes\"}, " MODEL "}",
                           "prepend_scheme \"sometimes\"");
    expect_load_json_error("{\"decoder\": {\"type\": \"WordPiece\"}, " MODEL "}", "decoder type \"WordPiece\"");
    expect_load_json_error("{\"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}, " MODEL "}",
                           "decoder Strip");
    expect_load_json_error("{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                           "unk_token \"<unk>\" is not in model.vocab");
    expect_load_json_error("{\"model\": ", "truncated or malformed");
#undef MODEL
}

/* The real SmolLM2 vocabulary lacks byte 0x04's token: that byte is dropped in encoding (no error, no
 * id), so decode(encode(text)) is the text without it. */
Test(tokenizer_formats, smollm2_drops_bytes_it_has_no_token_for) {
    qlt_tokenizer *tok;
    cr_assert_eq(qlt_tokenizer_load(&tok, QLT_TEST_DATA "/fixtures/tok-smollm2/tokenizer.json"), 0, "%s", qlt_error());
    cr_assert_eq(qlt_tokenizer_token_id(tok, "\x04"), -1);
    cr_assert_geq(qlt_tokenizer_token_id(tok, "\x05"), 0);
    qlt_ids ids = {0};
    cr_assert_eq(qlt_tokenizer_encode(tok, "\x04", 1, &ids), 0, "%s", qlt_error());
    cr_assert_eq(ids.len, 0);
    cr_assert_eq(qlt_tokenizer_encode(tok, "a\x04" "b", 3, &ids), 0, "%s", qlt_error());
    char *text;
    size_t len;
    cr_assert_eq(qlt_tokenizer_decode(tok, ids.data, ids.len, &text, &len), 0, "%s", qlt_error());
    cr_assert_str_eq(text, "ab");
    cr_assert_eq(qlt_tokenizer_eos_id(tok), 0); /* <|endoftext|> */
    free(text);
    qlt_ids_free(&ids);
    qlt_tokenizer_free(tok);
}
