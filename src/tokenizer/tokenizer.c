/* tokenizer.c: loading a Hugging Face tokenizer.json (see tokenizer.h): model (BPE vocabulary and
 * merges, in either layout: "a b" strings or ["a", "b"] pairs; byte_fallback, unk_token, fuse_unk,
 * ignore_merges), added tokens, and eos/pad and the chat template's name from tokenizer_config.json (the
 * file beside it, or text given to qlt_tokenizer_apply_config); the normalizer, pre-tokenizer and
 * decoder are parsed by their own modules. Everything unsupported is refused here, at load, with an
 * error that names the file and the key. */
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "common/hash.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_internal.h"

#define SUPPORTED                                                                                        \
    "qlora-train reads Hugging Face BPE tokenizers: byte-level (Qwen2/2.5/3, Llama-3, GPT-2, SmolLM style) and "   \
    "SentencePiece-style (Llama-2, Mistral, Gemma)"

static const cJSON *get(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static const char *get_string(const cJSON *obj, const char *key) {
    const cJSON *v = get(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int get_bool(const cJSON *obj, const char *key, int dflt) {
    const cJSON *v = get(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* The bytes a vocabulary string stands for: in a byte-level model the byte-level alphabet undone (the
 * UTF-8 itself for a string outside the alphabet), else the string. Returns the length; buf holds at
 * least strlen(s) bytes. */
static size_t token_bytes(const qlt_tokenizer *tok, const char *s, uint8_t *buf) {
    size_t n = strlen(s);
    int64_t m = tok->bpe.byte_level ? qlt_byte_level_decode(s, n, buf) : -1;
    if (m >= 0) return (size_t)m;
    memcpy(buf, s, n);
    return n;
}

/* A token id in tokenizer.json: a whole number from 0 to 2e9 (a fraction would be cut to another id). */
static int is_token_id(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 2e9 && v->valuedouble == floor(v->valuedouble);
}

static int load_vocab(qlt_tokenizer *tok, const char *path, const cJSON *vocab, const cJSON *added, const cJSON *merges) {
    int32_t max_id = -1;
    int64_t n_vocab = 0;
    for (const cJSON *v = vocab->child; v; v = v->next, n_vocab++) {
        if (!is_token_id(v))
            return qlt_fail("%s: model.vocab[\"%s\"] is not a token id (expected a non-negative integer)", path, v->string);
        if (v->valueint > max_id) max_id = v->valueint;
    }
    int64_t i = 0;
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next, i++) {
        const cJSON *id = get(a, "id");
        if (!is_token_id(id) || !get_string(a, "content"))
            return qlt_fail("%s: added_tokens[%lld] needs an integer \"id\" and a string \"content\"", path, (long long)i);
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (n_vocab == 0) return qlt_fail("%s: model.vocab is empty", path);
    /* the id tables are sized by the largest id: ids far past the number of tokens (mostly holes) would make
     * one stray id allocate gigabytes */
    int64_t n_tokens = n_vocab + i;
    if ((int64_t)max_id >= 2 * n_tokens + 1024)
        return qlt_fail("%s: token id %d is far past the %lld tokens the file defines (ids run from 0 with few "
                        "gaps): the file is corrupt", path, max_id, (long long)n_tokens);
    qlt_bpe_init(&tok->bpe, max_id + 1, n_vocab, cJSON_GetArraySize(merges));
    tok->bpe.byte_level = tok->pre.byte_level;
    uint8_t *buf = qlt_xmalloc(4096);
    size_t buf_cap = 4096;
    for (const cJSON *v = vocab->child; v; v = v->next) {
        size_t n = strlen(v->string);
        if (n * 2 + 2 > buf_cap) buf = qlt_xrealloc(buf, buf_cap = n * 2 + 2);
        size_t len = token_bytes(tok, v->string, buf);
        if (qlt_bpe_set_token(&tok->bpe, v->valueint, buf, len, v->string, n, 1) != 0) {
            free(buf);
            return qlt_fail_context("%s: model.vocab[\"%s\"]", path, v->string);
        }
    }
    i = 0;
    for (const cJSON *m = merges->child; m; m = m->next, i++) {
        const char *a = NULL, *b = NULL;
        char *pair = NULL;
        if (cJSON_IsString(m)) {
            pair = qlt_xstrdup(m->valuestring);
            char *sp = strchr(pair, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                *sp = '\0';
                a = pair;
                b = sp + 1;
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            a = m->child->valuestring;
            b = m->child->next->valuestring;
        }
        if (!a) {
            free(pair);
            free(buf);
            return qlt_fail("%s: model.merges[%lld] is neither \"a b\" nor [\"a\", \"b\"]", path, (long long)i);
        }
        size_t na = strlen(a), nb = strlen(b);
        if (na + nb + 2 > buf_cap) buf = qlt_xrealloc(buf, buf_cap = (na + nb) * 2 + 2);
        size_t la = token_bytes(tok, a, buf);
        int32_t ida = qlt_bpe_lookup(&tok->bpe, buf, la);
        size_t lb = token_bytes(tok, b, buf + la);
        int32_t idb = qlt_bpe_lookup(&tok->bpe, buf + la, lb);
        int32_t idm = qlt_bpe_lookup(&tok->bpe, buf, la + lb);
        if (ida < 0 || idb < 0 || idm < 0) {
            int r = qlt_fail("%s: model.merges[%lld] (\"%s\" + \"%s\") names a token that is not in model.vocab", path,
                             (long long)i, a, b);
            free(pair);
            free(buf);
            return r;
        }
        qlt_bpe_add_merge(&tok->bpe, ida, idb, (int32_t)i, idm);
        free(pair);
    }
    free(buf);
    qlt_bpe_finish(&tok->bpe);
    return 0;
}

static int added_cmp(const void *x, const void *y) {
    const qlt_added_token *a = x, *b = y;
    unsigned fa = (unsigned char)a->content[0], fb = (unsigned char)b->content[0];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id - b->id;
}

static void load_added(qlt_tokenizer *tok, const cJSON *added) {
    int n = added ? cJSON_GetArraySize(added) : 0;
    tok->added = qlt_xcalloc((size_t)n, sizeof *tok->added);
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        const char *content = get_string(a, "content");
        if (!content[0]) continue;
        qlt_added_token *t = &tok->added[tok->n_added++];
        t->content = qlt_xstrdup(content);
        t->len = (int32_t)strlen(content);
        t->id = get(a, "id")->valueint;
        t->special = get_bool(a, "special", 0);
        t->normalized = get_bool(a, "normalized", !t->special);
        if (t->normalized && tok->norm.n_steps > 0) tok->has_normalized_added = 1;
        if (tok->bpe.tok_off[t->id] < 0)
            qlt_bpe_set_token(&tok->bpe, t->id, t->content, (size_t)t->len, t->content, (size_t)t->len, 0);
    }
    qsort(tok->added, (size_t)tok->n_added, sizeof *tok->added, added_cmp);
    int32_t k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < tok->n_added && (unsigned char)tok->added[k].content[0] < b) k++;
        tok->added_first[b] = k;
    }
}

static int check_model(const char *path, const cJSON *model) {
    const char *type = get_string(model, "type");
    if (!type && get(model, "merges")) type = "BPE";
    if (!type || strcmp(type, "BPE") != 0)
        return qlt_fail("%s: model type \"%s\" is not supported: " SUPPORTED "; Unigram, WordPiece and WordLevel "
                        "models are not", path, type ? type : "?");
    const char *s;
    if (((s = get_string(model, "continuing_subword_prefix")) && s[0]) ||
        ((s = get_string(model, "end_of_word_suffix")) && s[0]))
        return qlt_fail("%s: BPE with a subword prefix/suffix (\"%s\") is not supported: " SUPPORTED, path, s);
    const cJSON *dropout = get(model, "dropout");
    if (dropout && cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return qlt_fail("%s: BPE dropout is not supported (set model.dropout to null)", path);
    if (!cJSON_IsObject(get(model, "vocab"))) return qlt_fail("%s: model.vocab is missing or not an object", path);
    if (!cJSON_IsArray(get(model, "merges"))) return qlt_fail("%s: model.merges is missing or not an array", path);
    return 0;
}

/* The token text in a tokenizer_config.json entry: "text" or {"content": "text"}. */
static const char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *v = get(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    return get_string(v, "content");
}

/* The built-in template a chat template's text is recognisably written for: "chatml" (<|im_start|>),
 * "llama3" (<|start_header_id|>), "mistral" ([INST]), "gemma" (<start_of_turn>) or "phi3" (<|end|> and
 * <|assistant|>: Phi-3's templates
 * write the other roles' headers as '<|' + role + '|>'), when exactly one of
 * them matches; NULL for anything else. A tokenizer_config.json may hold the template as
 * a string or as a list of {"name", "template"} (the one named "default" counts). */
static const char *recognise_chat_template(const cJSON *v) {
    const char *text = cJSON_IsString(v) ? v->valuestring : NULL;
    for (const cJSON *e = cJSON_IsArray(v) ? v->child : NULL; e && !text; e = e->next) {
        const char *name = get_string(e, "name");
        if (name && strcmp(name, "default") == 0) text = get_string(e, "template");
    }
    if (!text) return NULL;
    static const struct {
        const char *name, *marks[2];
    } known[] = {{"chatml", {"<|im_start|>", NULL}},
                 {"llama3", {"<|start_header_id|>", NULL}},
                 {"mistral", {"[INST]", NULL}},
                 {"phi3", {"<|end|>", "<|assistant|>"}},
                 {"gemma", {"<start_of_turn>", NULL}}};
    const char *found = NULL;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        int all = 1;
        for (int m = 0; m < 2 && known[i].marks[m]; m++) all &= strstr(text, known[i].marks[m]) != NULL;
        if (all && found) return NULL; /* two templates' marks: none recognised */
        if (all) found = known[i].name;
    }
    return found;
}

/* eos (when no well-known name gave one), pad and the chat template's name from a parsed
 * tokenizer_config.json; pad falls back to eos. */
static void apply_config(qlt_tokenizer *tok, const cJSON *cfg) {
    const char *eos = config_token(cfg, "eos_token"), *pad = config_token(cfg, "pad_token");
    if (tok->eos_id < 0 && eos) tok->eos_id = qlt_tokenizer_token_id(tok, eos);
    tok->pad_id = pad ? qlt_tokenizer_token_id(tok, pad) : -1;
    if (tok->pad_id < 0) tok->pad_id = tok->eos_id >= 0 ? tok->eos_id : 0;
    tok->chat_template = recognise_chat_template(get(cfg, "chat_template"));
}

/* eos/pad from tokenizer_config.json beside path, when it exists. */
static int load_config_ids(qlt_tokenizer *tok, const char *path) {
    size_t n = strlen(path);
    char *cfg_path = qlt_xmalloc(n + 32);
    memcpy(cfg_path, path, n + 1);
    char *slash = strrchr(cfg_path, '/');
    strcpy(slash ? slash + 1 : cfg_path, "tokenizer_config.json");
    if (qlt_file_exists(cfg_path)) {
        char *data;
        size_t len;
        if (qlt_read_file(cfg_path, &data, &len) != 0) {
            free(cfg_path);
            return -1;
        }
        cJSON *cfg = cJSON_ParseWithLength(data, len);
        free(data);
        if (!cfg) {
            int r = qlt_fail("%s: not valid JSON (fix or remove it; it only names eos/pad tokens)", cfg_path);
            free(cfg_path);
            return r;
        }
        apply_config(tok, cfg);
        cJSON_Delete(cfg);
    }
    free(cfg_path);
    if (tok->pad_id < 0) tok->pad_id = tok->eos_id >= 0 ? tok->eos_id : 0;
    return 0;
}

/* unk_token, byte_fallback, fuse_unk and ignore_merges of the model (after the vocabulary). */
static int load_model_options(qlt_tokenizer *tok, const char *path, const cJSON *model) {
    qlt_bpe *bpe = &tok->bpe;
    bpe->byte_fallback = get_bool(model, "byte_fallback", 0);
    bpe->fuse_unk = get_bool(model, "fuse_unk", 0);
    bpe->ignore_merges = get_bool(model, "ignore_merges", 0);
    const char *unk = get_string(model, "unk_token");
    if (unk) {
        size_t n = strlen(unk);
        uint8_t *buf = qlt_xmalloc(n + 1);
        bpe->unk_id = qlt_bpe_lookup(bpe, buf, token_bytes(tok, unk, buf));
        free(buf);
        if (bpe->unk_id < 0)
            return qlt_fail("%s: model.unk_token \"%s\" is not in model.vocab (add it or set unk_token to null)", path,
                            unk);
    }
    return 0;
}

static int load_json(qlt_tokenizer *tok, const char *path, const cJSON *root) {
    const cJSON *model = get(root, "model");
    if (!cJSON_IsObject(model)) return qlt_fail("%s: no \"model\" object: not a Hugging Face tokenizer.json", path);
    QLT_TRY(check_model(path, model));
    const cJSON *added = get(root, "added_tokens");
    if (added && !cJSON_IsArray(added)) return qlt_fail("%s: added_tokens is not an array", path);
    QLT_TRY(qlt_normalizer_parse(&tok->norm, get(root, "normalizer"), path));
    QLT_TRY(qlt_pre_tokenizer_parse(&tok->pre, get(root, "pre_tokenizer"), path));
    QLT_TRY(qlt_decoder_parse(&tok->dec, get(root, "decoder"), path));
    QLT_TRY(load_vocab(tok, path, get(model, "vocab"), added, get(model, "merges")));
    QLT_TRY(load_model_options(tok, path, model));
    load_added(tok, added);
    static const char *const eos_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
    tok->eos_id = tok->pad_id = -1;
    for (size_t i = 0; i < sizeof eos_names / sizeof *eos_names && tok->eos_id < 0; i++)
        tok->eos_id = qlt_tokenizer_token_id(tok, eos_names[i]);
    return 0;
}

int qlt_tokenizer_load_json(qlt_tokenizer **out, const char *json, size_t len, const char *name) {
    *out = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        int r = root ? qlt_fail("%s: not a JSON object: not a Hugging Face tokenizer.json", name)
                     : qlt_fail("%s: not valid JSON (error at byte %zu of %zu: the file is truncated or malformed; "
                                "copy tokenizer.json from the model again)", name, at, len);
        cJSON_Delete(root);
        return r;
    }
    qlt_tokenizer *tok = qlt_xcalloc(1, sizeof *tok);
    tok->hash = qlt_hash64(json, len, 0x746f6b656e697a65ULL);
    int r = load_json(tok, name, root);
    cJSON_Delete(root);
    if (r != 0) {
        qlt_tokenizer_free(tok);
        return -1;
    }
    if (tok->pad_id < 0) tok->pad_id = tok->eos_id >= 0 ? tok->eos_id : 0;
    *out = tok;
    return 0;
}

int qlt_tokenizer_load(qlt_tokenizer **out, const char *path) {
    *out = NULL;
    char *data;
    size_t len;
    if (qlt_read_file(path, &data, &len) != 0) return qlt_fail_context("tokenizer");
    qlt_tokenizer *tok;
    int r = qlt_tokenizer_load_json(&tok, data, len, path);
    free(data);
    if (r != 0) return -1;
    tok->pad_id = -1;
    if (load_config_ids(tok, path) != 0) {
        qlt_tokenizer_free(tok);
        return -1;
    }
    *out = tok;
    return 0;
}

int qlt_tokenizer_apply_config(qlt_tokenizer *tok, const char *config_json, const char *name) {
    cJSON *cfg = cJSON_Parse(config_json);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return qlt_fail("%s: the tokenizer configuration is not a JSON object", name);
    }
    apply_config(tok, cfg);
    cJSON_Delete(cfg);
    tok->hash = qlt_hash64(config_json, strlen(config_json), tok->hash);
    return 0;
}

void qlt_tokenizer_free(qlt_tokenizer *tok) {
    if (!tok) return;
    qlt_bpe_free(&tok->bpe);
    qlt_normalizer_free(&tok->norm);
    qlt_pre_tokenizer_free(&tok->pre);
    qlt_decoder_free(&tok->dec);
    for (int32_t i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    free(tok);
}

int32_t qlt_tokenizer_n_ids(const qlt_tokenizer *tok) { return tok->bpe.n_ids; }
int32_t qlt_tokenizer_eos_id(const qlt_tokenizer *tok) { return tok->eos_id; }
int32_t qlt_tokenizer_pad_id(const qlt_tokenizer *tok) { return tok->pad_id; }
uint64_t qlt_tokenizer_hash(const qlt_tokenizer *tok) { return tok->hash; }
const char *qlt_tokenizer_chat_template(const qlt_tokenizer *tok) { return tok->chat_template; }

int32_t qlt_tokenizer_token_id(const qlt_tokenizer *tok, const char *text) {
    size_t n = strlen(text);
    if (n == 0) return -1;
    unsigned b = (unsigned char)text[0];
    for (int32_t k = tok->added_first[b]; k < tok->added_first[b + 1]; k++)
        if ((size_t)tok->added[k].len == n && memcmp(tok->added[k].content, text, n) == 0) return tok->added[k].id;
    return qlt_bpe_lookup(&tok->bpe, text, n);
}
