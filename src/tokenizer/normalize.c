/* normalize.c: parsing and applying the normalizers of normalize.h. Unicode forms go through
 * utf8proc_map; Replace and Prepend are byte-string edits (valid UTF-8 in, valid UTF-8 out). */
#define _GNU_SOURCE /* memmem */
#include "tokenizer/normalize.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/error.h"

static const char *json_string(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int add_step(qlt_normalizer *n, const char *file, qlt_norm_step step) {
    if (n->n_steps == QLT_NORM_MAX_STEPS) {
        free(step.pattern);
        free(step.content);
        return qlt_fail("%s: more than %d normalizers", file, QLT_NORM_MAX_STEPS);
    }
    n->steps[n->n_steps++] = step;
    return 0;
}

int qlt_normalizer_parse(qlt_normalizer *n, const cJSON *json, const char *file) {
    if (!json || cJSON_IsNull(json)) return 0;
    const char *type = json_string(json, "type");
    if (!type) return qlt_fail("%s: normalizer has no \"type\"", file);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "normalizers"); /* absent or null: empty */
        for (const cJSON *c = cJSON_IsArray(list) ? list->child : NULL; c; c = c->next)
            QLT_TRY(qlt_normalizer_parse(n, c, file));
        return 0;
    }
    static const char *const forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
    for (int f = 0; f < 4; f++)
        if (strcmp(type, forms[f]) == 0) return add_step(n, file, (qlt_norm_step){.kind = (qlt_norm_kind)(f + 1)});
    if (strcmp(type, "Replace") == 0) {
        const char *pattern = json_string(cJSON_GetObjectItemCaseSensitive(json, "pattern"), "String");
        const char *content = json_string(json, "content");
        if (!pattern || !content)
            return qlt_fail("%s: normalizer Replace needs pattern.String and a string \"content\" (a Regex pattern is "
                            "not supported)", file);
        if (!pattern[0]) return qlt_fail("%s: normalizer Replace has an empty pattern", file);
        qlt_norm_step s = {QLT_NORM_REPLACE, qlt_xstrdup(pattern), qlt_xstrdup(content), strlen(pattern),
                           strlen(content)};
        return add_step(n, file, s);
    }
    if (strcmp(type, "Prepend") == 0) {
        const char *prepend = json_string(json, "prepend");
        if (!prepend) return qlt_fail("%s: normalizer Prepend needs a string \"prepend\"", file);
        qlt_norm_step s = {QLT_NORM_PREPEND, NULL, qlt_xstrdup(prepend), 0, strlen(prepend)};
        return add_step(n, file, s);
    }
    return qlt_fail("%s: normalizer type \"%s\" is not supported (supported: NFC, NFD, NFKC, NFKD, Replace of a "
                    "string, Prepend, and a Sequence of them)", file, type);
}

void qlt_normalizer_free(qlt_normalizer *n) {
    for (int s = 0; s < n->n_steps; s++) {
        free(n->steps[s].pattern);
        free(n->steps[s].content);
    }
    n->n_steps = 0;
}

static int is_ascii(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

/* text with every occurrence of the step's pattern replaced; NULL when there is none. */
static char *replace_all(const qlt_norm_step *st, const char *text, size_t len, size_t *out_len) {
    size_t count = 0;
    for (const char *p = text; (p = memmem(p, len - (size_t)(p - text), st->pattern, st->pattern_len)) != NULL;
         p += st->pattern_len)
        count++;
    if (count == 0) return NULL;
    size_t n = len - count * st->pattern_len + count * st->content_len;
    char *out = qlt_xmalloc(n + 1), *o = out;
    const char *p = text, *end = text + len;
    for (const char *hit; (hit = memmem(p, (size_t)(end - p), st->pattern, st->pattern_len)) != NULL;) {
        memcpy(o, p, (size_t)(hit - p));
        o += hit - p;
        memcpy(o, st->content, st->content_len);
        o += st->content_len;
        p = hit + st->pattern_len;
    }
    memcpy(o, p, (size_t)(end - p));
    *out_len = n;
    return out;
}

static char *unicode_form(qlt_norm_kind kind, const char *text, size_t len, size_t *out_len) {
    utf8proc_option_t opt = UTF8PROC_STABLE;
    switch (kind) {
    case QLT_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
    case QLT_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case QLT_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &dst, opt);
    if (r < 0) {
        qlt_fail("Unicode normalization failed: %s", utf8proc_errmsg(r));
        return NULL;
    }
    *out_len = (size_t)r;
    return (char *)dst;
}

int qlt_normalize(const qlt_normalizer *n, const char *text, size_t len, char **out, size_t *out_len, int *owned) {
    *out = (char *)text;
    *out_len = len;
    *owned = 0;
    for (int s = 0; s < n->n_steps; s++) {
        const qlt_norm_step *st = &n->steps[s];
        char *next = NULL;
        size_t next_len = 0;
        if (st->kind == QLT_NORM_REPLACE) {
            next = replace_all(st, *out, *out_len, &next_len);
        } else if (st->kind == QLT_NORM_PREPEND) {
            if (*out_len == 0) continue;
            next_len = st->content_len + *out_len;
            next = qlt_xmalloc(next_len + 1);
            memcpy(next, st->content, st->content_len);
            memcpy(next + st->content_len, *out, *out_len);
        } else if (!is_ascii(*out, *out_len)) {
            next = unicode_form(st->kind, *out, *out_len, &next_len);
            if (!next) {
                if (*owned) free(*out);
                return -1;
            }
        }
        if (!next) continue;
        if (*owned) free(*out);
        *out = next;
        *out_len = next_len;
        *owned = 1;
    }
    return 0;
}
