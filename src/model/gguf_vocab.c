/* gguf_vocab.c: tokenizer.json -> tokenizer.ggml.* metadata (see gguf_vocab.h). */
#include "model/gguf_vocab.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "common/whole_number.h"

/* The split regexes of the two pre-tokenizers llama.cpp knows by these names. */
static const struct {
    const char *name, *regex;
} known_pre[] = {
    {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

static cJSON *read_json(const char *path, int required) {
    if (!required && !qlt_file_exists(path)) return NULL;
    char *text = NULL;
    if (qlt_read_file(path, &text, NULL) != 0) return NULL;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        qlt_fail("%s: not a JSON object", path);
        return NULL;
    }
    return root;
}

/* The Split regex of the pre_tokenizer (alone or in a Sequence), or NULL. */
static const char *split_regex(const cJSON *pre) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    const cJSON *one = pre;
    for (const cJSON *it = cJSON_IsArray(list) ? list->child : pre; it; it = cJSON_IsArray(list) ? it->next : NULL) {
        one = it;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(one, "type");
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(one, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "Split") && cJSON_IsString(re)) return re->valuestring;
    }
    return NULL;
}

/* As convert_hf_to_gguf.py's does_token_look_special. */
static int looks_special(const char *s) {
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]")) return 1;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return 1;
    if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>")) return 1; /* <｜ ... ｜> */
    if (n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>') return 1;
    return 0;
}

/* One merge part with its spaces as U+0120 (chr(ord(' ') + 256)), appended to buf. */
static void append_part(char **buf, size_t *len, const char *s) {
    *buf = qlt_xrealloc(*buf, *len + 1);
    (*buf)[*len] = '\0';
    for (; *s; s++) {
        *buf = qlt_xrealloc(*buf, *len + 3);
        if (*s == ' ') {
            (*buf)[(*len)++] = (char)0xc4;
            (*buf)[(*len)++] = (char)0xa0;
        } else {
            (*buf)[(*len)++] = *s;
        }
    }
    (*buf)[*len] = '\0';
}

static int load_merges(qlt_gguf_vocab *v, const cJSON *merges, const char *path) {
    if (!cJSON_IsArray(merges)) return qlt_fail("%s: model.merges must be a list", path);
    v->n_merges = cJSON_GetArraySize(merges);
    v->merges = qlt_xcalloc((size_t)v->n_merges + 1, sizeof *v->merges);
    int64_t i = 0;
    for (const cJSON *m = merges->child; m; m = m->next, i++) {
        if (cJSON_IsString(m)) {
            v->merges[i] = qlt_xstrdup(m->valuestring);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            char *buf = NULL;
            size_t len = 0;
            append_part(&buf, &len, m->child->valuestring);
            buf = qlt_xrealloc(buf, len + 2);
            buf[len++] = ' '; /* the separator stays a space */
            buf[len] = '\0';
            append_part(&buf, &len, m->child->next->valuestring);
            v->merges[i] = buf;
        } else {
            return qlt_fail("%s: model.merges[%lld] is neither \"a b\" nor [a, b]", path, (long long)i);
        }
    }
    return 0;
}

/* The id of the added token whose content is tokenizer_config.json's <typ>_token (a string or {content}). */
static int32_t special_from_config(const cJSON *tc, const cJSON *added, const char *typ) {
    char key[32];
    snprintf(key, sizeof key, "%s_token", typ);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(tc, key);
    if (cJSON_IsObject(e)) e = cJSON_GetObjectItemCaseSensitive(e, "content");
    if (!cJSON_IsString(e)) return -1;
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content"), *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (cJSON_IsString(c) && cJSON_IsNumber(id) && !strcmp(c->valuestring, e->valuestring)) return (int32_t)id->valueint;
    }
    return -1;
}

static void set_special(int32_t *slot, const cJSON *tc, const cJSON *added, const cJSON *cfg, const char *typ, int32_t n) {
    int32_t id = tc ? special_from_config(tc, added, typ) : -1;
    if (id < 0 && cfg) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", typ);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(cfg, key);
        if (cJSON_IsNumber(e) && e->valuedouble >= 0 && qlt_is_int32(e->valuedouble)) id = (int32_t)e->valuedouble;
    }
    *slot = id >= 0 && id < n ? id : -1;
}

/* add_bos from a TemplateProcessing post-processor whose single template starts with the bos token. */
static int template_adds_bos(const cJSON *tok, const cJSON *tc) {
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(tok, "post_processor");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(tc, "bos_token");
    if (cJSON_IsObject(bos)) bos = cJSON_GetObjectItemCaseSensitive(bos, "content");
    for (const cJSON *p = cJSON_IsArray(list) ? list->child : pp; p; p = cJSON_IsArray(list) ? p->next : NULL) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "TemplateProcessing") || cJSON_GetArraySize(single) < 2)
            continue;
        const cJSON *first = cJSON_GetObjectItemCaseSensitive(single->child, "SpecialToken");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(first, "id");
        if (cJSON_IsString(id)) return cJSON_IsString(bos) && !strcmp(id->valuestring, bos->valuestring);
    }
    return -1;
}

int qlt_gguf_vocab_load(qlt_gguf_vocab *v, const char *tokenizer_json, const char *config_json_dir, int32_t vocab_size) {
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->unk = v->pad = -1;
    v->add_bos = v->add_eos = -1;
    cJSON *tok = read_json(tokenizer_json, 1);
    if (!tok) return -1;
    char *dir = qlt_xstrdup(tokenizer_json);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = '\0';
    else strcpy(dir, ".");
    char *tc_path = qlt_path_join(dir, "tokenizer_config.json"), *cfg_path = qlt_path_join(config_json_dir, "config.json");
    char *jinja_path = qlt_path_join(dir, "chat_template.jinja");
    cJSON *tc = read_json(tc_path, 0), *cfg = read_json(cfg_path, 0);
    int rc = (!tc && qlt_file_exists(tc_path)) || (!cfg && qlt_file_exists(cfg_path)) ? -1 : 0;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
    if (rc == 0 && (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE") || !cJSON_IsObject(vocab)))
        rc = qlt_fail("%s: model.type is not BPE with a vocab object: only byte-level BPE tokenizers (Llama 3, Qwen) "
                      "are written to GGUF here", tokenizer_json);
    v->n = vocab_size;
    v->tokens = qlt_xcalloc((size_t)vocab_size, sizeof *v->tokens);
    v->types = qlt_xcalloc((size_t)vocab_size, sizeof *v->types);
    for (const cJSON *e = rc == 0 ? vocab->child : NULL; e && rc == 0; e = e->next) {
        int64_t id = cJSON_IsNumber(e) ? (int64_t)e->valuedouble : -1;
        if (id < 0 || id >= vocab_size)
            rc = qlt_fail("%s: token '%s' has id %lld, outside config.json's vocab_size %d: the tokenizer is not this "
                          "model's", tokenizer_json, e->string, (long long)id, vocab_size);
        else if (!v->tokens[id]) {
            v->tokens[id] = qlt_xstrdup(e->string);
            v->types[id] = QLT_GGUF_TOKEN_NORMAL;
        }
    }
    for (const cJSON *a = rc == 0 && cJSON_IsArray(added) ? added->child : NULL; a && rc == 0; a = a->next) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content"), *jid = cJSON_GetObjectItemCaseSensitive(a, "id");
        int64_t id = cJSON_IsNumber(jid) ? (int64_t)jid->valuedouble : -1;
        if (!cJSON_IsString(c) || id < 0 || id >= vocab_size) {
            rc = qlt_fail("%s: added token %lld ('%s') lies outside config.json's vocab_size %d", tokenizer_json,
                          (long long)id, cJSON_IsString(c) ? c->valuestring : "?", vocab_size);
            break;
        }
        free(v->tokens[id]);
        v->tokens[id] = qlt_xstrdup(c->valuestring);
        int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
        v->types[id] = special || looks_special(c->valuestring) ? QLT_GGUF_TOKEN_CONTROL : QLT_GGUF_TOKEN_USER_DEFINED;
    }
    for (int32_t id = 0; id < vocab_size && rc == 0; id++) {
        if (v->tokens[id]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%d]", id);
        v->tokens[id] = qlt_xstrdup(pad);
        v->types[id] = QLT_GGUF_TOKEN_UNUSED;
    }
    if (rc == 0) rc = load_merges(v, cJSON_GetObjectItemCaseSensitive(model, "merges"), tokenizer_json);
    if (rc == 0) {
        const char *re = split_regex(cJSON_GetObjectItemCaseSensitive(tok, "pre_tokenizer"));
        snprintf(v->pre, sizeof v->pre, "default");
        for (size_t i = 0; re && i < sizeof known_pre / sizeof *known_pre; i++)
            if (!strcmp(re, known_pre[i].regex)) snprintf(v->pre, sizeof v->pre, "%s", known_pre[i].name);
        if (!strcmp(v->pre, "default"))
            fprintf(stderr, "qlora-train: %s: the pre-tokenizer is neither Llama 3's nor Qwen2's: tokenizer.ggml.pre is "
                            "\"default\" (llama.cpp splits words its own way)\n", tokenizer_json);
        set_special(&v->bos, tc, added, cfg, "bos", vocab_size);
        set_special(&v->eos, tc, added, cfg, "eos", vocab_size);
        set_special(&v->unk, tc, added, cfg, "unk", vocab_size);
        set_special(&v->pad, tc, added, cfg, "pad", vocab_size);
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token");
        const cJSON *ae = cJSON_GetObjectItemCaseSensitive(tc, "add_eos_token");
        v->add_bos = cJSON_IsBool(ab) ? cJSON_IsTrue(ab) : tc ? template_adds_bos(tok, tc) : -1;
        if (cJSON_IsBool(ae)) v->add_eos = cJSON_IsTrue(ae);
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
        char *jinja = NULL;
        if (cJSON_IsString(ct)) v->chat_template = qlt_xstrdup(ct->valuestring);
        else if (qlt_file_exists(jinja_path) && qlt_read_file(jinja_path, &jinja, NULL) == 0) v->chat_template = jinja;
    }
    cJSON_Delete(tok);
    cJSON_Delete(tc);
    cJSON_Delete(cfg);
    free(dir);
    free(tc_path);
    free(cfg_path);
    free(jinja_path);
    if (rc != 0) qlt_gguf_vocab_free(v);
    return rc;
}

void qlt_gguf_vocab_add(const qlt_gguf_vocab *v, qlt_gguf_writer *w) {
    qlt_gguf_add_string(w, "tokenizer.ggml.model", "gpt2");
    qlt_gguf_add_string(w, "tokenizer.ggml.pre", v->pre);
    qlt_gguf_add_string_array(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n);
    qlt_gguf_add_i32_array(w, "tokenizer.ggml.token_type", v->types, v->n);
    qlt_gguf_add_string_array(w, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges);
    if (v->bos >= 0) qlt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0) qlt_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->unk >= 0) qlt_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk);
    if (v->pad >= 0) qlt_gguf_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad);
    if (v->add_bos >= 0) qlt_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    if (v->add_eos >= 0) qlt_gguf_add_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos);
    if (v->chat_template) qlt_gguf_add_string(w, "tokenizer.chat_template", v->chat_template);
}

void qlt_gguf_vocab_free(qlt_gguf_vocab *v) {
    for (int32_t i = 0; v->tokens && i < v->n; i++) free(v->tokens[i]);
    for (int64_t i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v->chat_template);
    memset(v, 0, sizeof *v);
}
