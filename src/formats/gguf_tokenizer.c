/* gguf_tokenizer.c: a GGUF file's tokenizer metadata as tokenizer.json text (see gguf_tokenizer.h). */
#include "formats/gguf_tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tokenizer/byte_level.h"

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum { TOKEN_UNDEFINED = 0, TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE };

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_REGEX                                                                                \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
    "\\s+(?!\\S)|\\s+"
#define QWEN2_REGEX                                                                                 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"       \
    "\\s+(?!\\S)|\\s+"

/* What a tokenizer.ggml.pre name stands for, as the original tokenizer.json writes it. */
typedef struct pre_spec {
    const char *name;
    int nfc;             /* an NFC normalizer */
    const char *split;   /* a Split (Isolated) regex before a regex-less ByteLevel; NULL: ByteLevel's own regex */
    int digits;          /* a Digits (individual) pre-tokenizer first */
    int ignore_merges;   /* BPE ignore_merges (Llama-3) */
} pre_spec;

static const pre_spec pre_specs[] = {
    {"default", 0, NULL, 0, 0},       {"gpt2", 0, NULL, 0, 0},          {"smollm", 0, NULL, 1, 0},
    {"llama-bpe", 0, LLAMA3_REGEX, 0, 1}, {"llama3", 0, LLAMA3_REGEX, 0, 1}, {"llama-v3", 0, LLAMA3_REGEX, 0, 1},
    {"qwen2", 1, QWEN2_REGEX, 0, 0},
};

static cJSON *byte_level(int use_regex) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "ByteLevel");
    cJSON_AddBoolToObject(b, "add_prefix_space", 0);
    cJSON_AddBoolToObject(b, "trim_offsets", use_regex);
    cJSON_AddBoolToObject(b, "use_regex", use_regex);
    return b;
}

static cJSON *pre_tokenizer(const pre_spec *p) {
    if (!p->split && !p->digits) return byte_level(1);
    cJSON *seq = cJSON_CreateObject();
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON *list = cJSON_AddArrayToObject(seq, "pretokenizers");
    cJSON *first = cJSON_CreateObject();
    if (p->digits) {
        cJSON_AddStringToObject(first, "type", "Digits");
        cJSON_AddBoolToObject(first, "individual_digits", 1);
    } else {
        cJSON_AddStringToObject(first, "type", "Split");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(first, "pattern"), "Regex", p->split);
        cJSON_AddStringToObject(first, "behavior", "Isolated");
        cJSON_AddBoolToObject(first, "invert", 0);
    }
    cJSON_AddItemToArray(list, first);
    cJSON_AddItemToArray(list, byte_level(p->digits));
    return seq;
}

/* A metadata string as a C string (heap); NULL with qlt_fail when it holds a NUL byte. */
static char *c_string(const qlt_gguf *g, const char *s, uint64_t len, const char *what, uint64_t index) {
    if (memchr(s, '\0', (size_t)len)) {
        qlt_fail("%s: %s[%llu] holds a NUL byte, which a tokenizer cannot hold", g->path, what,
                 (unsigned long long)index);
        return NULL;
    }
    char *c = qlt_xmalloc((size_t)len + 1);
    memcpy(c, s, (size_t)len);
    c[len] = '\0';
    return c;
}

/* The text a tokenizer_config.json would give token id: an added token's text as it is, a vocabulary
 * token's byte-level string as its raw bytes (NULL when those are not a C string). Heap. */
static char *token_text(const char *tok, int type) {
    if (type == TOKEN_CONTROL || type == TOKEN_USER_DEFINED) return qlt_xstrdup(tok);
    size_t n = strlen(tok);
    char *raw = qlt_xmalloc(n + 1);
    int64_t m = qlt_byte_level_decode(tok, n, (uint8_t *)raw);
    if (m < 0) {
        memcpy(raw, tok, n + 1);
        return raw;
    }
    raw[m] = '\0';
    if ((size_t)m != strlen(raw)) {
        free(raw);
        return NULL;
    }
    return raw;
}

/* tokenizer_config.json: eos_token / pad_token by their text, chat_template as stored. */
static int add_special(const qlt_gguf *g, cJSON *cfg, const char *key, const char *field, char **tokens,
                       const int *types, uint64_t n) {
    int64_t id;
    int found = qlt_gguf_get_int(g, key, -1, &id);
    if (found < 0) return -1;
    if (!found) return 0;
    if (id < 0 || (uint64_t)id >= n)
        return qlt_fail("%s: %s is %lld, not a token id (tokenizer.ggml.tokens has %llu)", g->path, key, (long long)id,
                        (unsigned long long)n);
    char *text = token_text(tokens[id], types[id]);
    if (text) cJSON_AddStringToObject(cfg, field, text);
    free(text);
    return 0;
}

static const pre_spec *find_pre(const qlt_gguf *g) {
    const char *s;
    uint64_t len;
    if (qlt_gguf_get_string(g, "tokenizer.ggml.pre", &s, &len) < 0) return NULL;
    if (!s) return &pre_specs[0];
    for (size_t i = 0; i < sizeof pre_specs / sizeof pre_specs[0]; i++)
        if (strlen(pre_specs[i].name) == len && memcmp(pre_specs[i].name, s, len) == 0) return &pre_specs[i];
    qlt_fail("%s: tokenizer.ggml.pre \"%.*s\" is not supported (supported: default, gpt2, smollm, llama-bpe, llama3, "
             "qwen2); set data.tokenizer to the model's tokenizer.json", g->path, (int)(len > 64 ? 64 : len), s);
    return NULL;
}

int qlt_gguf_tokenizer_json(const qlt_gguf *g, char **json, char **config_json) {
    *json = *config_json = NULL;
    const char *model;
    uint64_t model_len;
    if (qlt_gguf_get_string(g, "tokenizer.ggml.model", &model, &model_len) < 0) return -1;
    if (!model)
        return qlt_fail("%s: no tokenizer in the file (no tokenizer.ggml.model); set data.tokenizer to the model's "
                        "tokenizer.json", g->path);
    if (!(model_len == 4 && memcmp(model, "gpt2", 4) == 0))
        return qlt_fail("%s: tokenizer.ggml.model is \"%.*s\": only byte-level BPE (\"gpt2\") tokenizers are read from "
                        "GGUF files; set data.tokenizer to the model's tokenizer.json", g->path,
                        (int)(model_len > 32 ? 32 : model_len), model);
    const pre_spec *pre = find_pre(g);
    if (!pre) return -1;
    const qlt_gguf_kv *tok_kv, *type_kv, *merge_kv;
    if (qlt_gguf_get_array(g, "tokenizer.ggml.tokens", QLT_GGUF_VAL_STRING, &tok_kv) < 0 ||
        qlt_gguf_get_array(g, "tokenizer.ggml.token_type", QLT_GGUF_VAL_COUNT, &type_kv) < 0 ||
        qlt_gguf_get_array(g, "tokenizer.ggml.merges", QLT_GGUF_VAL_STRING, &merge_kv) < 0)
        return -1;
    if (!tok_kv || tok_kv->count == 0) return qlt_fail("%s: tokenizer.ggml.tokens is missing or empty", g->path);
    if (!merge_kv) return qlt_fail("%s: tokenizer.ggml.merges is missing (a BPE tokenizer needs them)", g->path);
    if (type_kv && (type_kv->count != tok_kv->count || type_kv->elem_type == QLT_GGUF_VAL_STRING ||
                    type_kv->elem_type == QLT_GGUF_VAL_ARRAY))
        return qlt_fail("%s: tokenizer.ggml.token_type must hold one integer per token (%llu tokens, %llu %s values)",
                        g->path, (unsigned long long)tok_kv->count, (unsigned long long)type_kv->count,
                        qlt_gguf_vtype_name(type_kv->elem_type));
    uint64_t n = tok_kv->count;
    if (n > (uint64_t)INT32_MAX) return qlt_fail("%s: tokenizer.ggml.tokens holds more than 2^31 tokens", g->path);
    char **tokens = qlt_xcalloc((size_t)n, sizeof *tokens);
    int *types = qlt_xmalloc(sizeof *types * (size_t)n);
    int rc = -1;
    cJSON *root = cJSON_CreateObject(), *cfg = cJSON_CreateObject();
    const uint8_t *p = tok_kv->data;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        uint64_t len;
        qlt_gguf_next_string(&p, &s, &len);
        if (!(tokens[i] = c_string(g, s, len, "tokenizer.ggml.tokens", i))) goto done;
        types[i] = type_kv ? (int)qlt_gguf_array_int(type_kv, i) : TOKEN_NORMAL;
    }
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    if (pre->nfc) cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "normalizer"), "type", "NFC");
    else cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer(pre));
    cJSON_AddItemToObject(root, "decoder", byte_level(1));
    cJSON *bpe = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(bpe, "type", "BPE");
    cJSON_AddBoolToObject(bpe, "ignore_merges", pre->ignore_merges);
    cJSON *vocab = cJSON_AddObjectToObject(bpe, "vocab");
    cJSON *merges = cJSON_AddArrayToObject(bpe, "merges");
    for (uint64_t i = 0; i < n; i++)
        if (types[i] != TOKEN_UNUSED && types[i] != TOKEN_CONTROL && types[i] != TOKEN_USER_DEFINED)
            cJSON_AddItemToObject(vocab, tokens[i], cJSON_CreateNumber((double)i));
    for (uint64_t i = 0; i < n; i++) {
        if (types[i] == TOKEN_CONTROL || types[i] == TOKEN_USER_DEFINED) {
            /* in the vocabulary too, by its byte-level spelling, unless a normal token spells the same: Hugging
             * Face's tokenizers give an added token its vocabulary id, and a new one after the vocabulary
             * when it has none */
            size_t len = strlen(tokens[i]);
            char *spelled = qlt_xmalloc(2 * len + 1);
            spelled[qlt_byte_level_encode((const uint8_t *)tokens[i], len, spelled)] = '\0';
            if (!cJSON_GetObjectItemCaseSensitive(vocab, spelled))
                cJSON_AddItemToObject(vocab, spelled, cJSON_CreateNumber((double)i));
            free(spelled);
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddStringToObject(a, "content", tokens[i]);
            cJSON_AddBoolToObject(a, "single_word", 0);
            cJSON_AddBoolToObject(a, "lstrip", 0);
            cJSON_AddBoolToObject(a, "rstrip", 0);
            cJSON_AddBoolToObject(a, "normalized", 0);
            cJSON_AddBoolToObject(a, "special", types[i] == TOKEN_CONTROL);
            cJSON_AddItemToArray(added, a);
        }
    }
    p = merge_kv->data;
    for (uint64_t i = 0; i < merge_kv->count; i++) {
        const char *s;
        uint64_t len;
        qlt_gguf_next_string(&p, &s, &len);
        char *m = c_string(g, s, len, "tokenizer.ggml.merges", i);
        if (!m) goto done;
        cJSON_AddItemToArray(merges, cJSON_CreateString(m));
        free(m);
    }
    if (add_special(g, cfg, "tokenizer.ggml.eos_token_id", "eos_token", tokens, types, n) ||
        add_special(g, cfg, "tokenizer.ggml.padding_token_id", "pad_token", tokens, types, n))
        goto done;
    const char *tmpl;
    uint64_t tmpl_len;
    if (qlt_gguf_get_string(g, "tokenizer.chat_template", &tmpl, &tmpl_len) < 0) goto done;
    if (tmpl) {
        char *t = c_string(g, tmpl, tmpl_len, "tokenizer.chat_template", 0);
        if (!t) goto done;
        cJSON_AddStringToObject(cfg, "chat_template", t);
        free(t);
    }
    *json = cJSON_PrintUnformatted(root);
    *config_json = cJSON_PrintUnformatted(cfg);
    QLT_ASSERT(*json && *config_json);
    rc = 0;
done:
    for (uint64_t i = 0; i < n; i++) free(tokens[i]);
    free(tokens);
    free(types);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return rc;
}

int qlt_gguf_tokenizer_load(qlt_tokenizer **out, const qlt_gguf *g) {
    *out = NULL;
    char *json, *config;
    QLT_TRY(qlt_gguf_tokenizer_json(g, &json, &config));
    size_t n = strlen(g->path);
    char *name = qlt_xmalloc(n + 32);
    snprintf(name, n + 32, "%s (tokenizer)", g->path);
    int rc = qlt_tokenizer_load_json(out, json, strlen(json), name);
    if (rc == 0 && (rc = qlt_tokenizer_apply_config(*out, config, name)) != 0) {
        qlt_tokenizer_free(*out);
        *out = NULL;
    }
    free(name);
    free(json);
    free(config);
    return rc;
}

int qlt_gguf_tokenizer_load_file(qlt_tokenizer **out, const char *path) {
    *out = NULL;
    qlt_gguf g;
    QLT_TRY(qlt_gguf_open(&g, path));
    int rc = qlt_gguf_tokenizer_load(out, &g);
    qlt_gguf_close(&g);
    return rc;
}
