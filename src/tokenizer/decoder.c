/* decoder.c: parsing and running the decoder chain of decoder.h. The list of strings a step reads and
 * writes is one byte buffer plus the end offset of each string. */
#define _GNU_SOURCE /* memmem */
#include "tokenizer/decoder.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

static const char *json_string(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int one_char(const char *s) { return s[0] && strlen(s) == qlt_utf8_char_len((unsigned char)s[0]); }

static int parse_step(qlt_decoder *d, const cJSON *json, const char *file) {
    const char *type = json_string(json, "type");
    if (!type) return qlt_fail("%s: decoder has no \"type\"", file);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "decoders");
        for (const cJSON *c = cJSON_IsArray(list) ? list->child : NULL; c; c = c->next) QLT_TRY(parse_step(d, c, file));
        return 0;
    }
    if (d->n_steps == QLT_DEC_MAX_STEPS) return qlt_fail("%s: more than %d decoders", file, QLT_DEC_MAX_STEPS);
    qlt_dec_step st = {0};
    if (strcmp(type, "ByteLevel") == 0) {
        st.kind = QLT_DEC_BYTE_LEVEL;
    } else if (strcmp(type, "ByteFallback") == 0) {
        st.kind = QLT_DEC_BYTE_FALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        st.kind = QLT_DEC_FUSE;
    } else if (strcmp(type, "Replace") == 0) {
        const char *pattern = json_string(cJSON_GetObjectItemCaseSensitive(json, "pattern"), "String");
        const char *content = json_string(json, "content");
        if (!pattern || !pattern[0] || !content)
            return qlt_fail("%s: decoder Replace needs a non-empty pattern.String and a string \"content\" (a Regex "
                            "pattern is not supported)", file);
        st = (qlt_dec_step){.kind = QLT_DEC_REPLACE, .pattern = qlt_xstrdup(pattern), .content = qlt_xstrdup(content),
                            .pattern_len = strlen(pattern), .content_len = strlen(content)};
    } else if (strcmp(type, "Strip") == 0) {
        const char *content = json_string(json, "content");
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(json, "start");
        const cJSON *stop = cJSON_GetObjectItemCaseSensitive(json, "stop");
        if (!content || !one_char(content) || !cJSON_IsNumber(start) || !cJSON_IsNumber(stop) ||
            start->valuedouble < 0 || stop->valuedouble < 0)
            return qlt_fail("%s: decoder Strip needs a one-character \"content\" and non-negative \"start\", \"stop\"",
                            file);
        st = (qlt_dec_step){.kind = QLT_DEC_STRIP, .content = qlt_xstrdup(content), .content_len = strlen(content),
                            .start = (int64_t)start->valuedouble, .stop = (int64_t)stop->valuedouble};
    } else if (strcmp(type, "Metaspace") == 0) {
        const char *rep = json_string(json, "replacement");
        if (!rep) rep = "\xe2\x96\x81";
        if (!one_char(rep)) return qlt_fail("%s: decoder Metaspace replacement \"%s\" is not one character", file, rep);
        const char *scheme = json_string(json, "prepend_scheme");
        const cJSON *aps = cJSON_GetObjectItemCaseSensitive(json, "add_prefix_space");
        int never = scheme ? strcmp(scheme, "never") == 0 : cJSON_IsFalse(aps);
        st = (qlt_dec_step){.kind = QLT_DEC_METASPACE, .content = qlt_xstrdup(rep), .content_len = strlen(rep),
                            .prepend_scheme = never ? QLT_PREPEND_NEVER : QLT_PREPEND_ALWAYS};
    } else {
        return qlt_fail("%s: decoder type \"%s\" is not supported (supported: ByteLevel, Metaspace, Replace of a "
                        "string, ByteFallback, Fuse, Strip, and a Sequence of them)", file, type);
    }
    d->steps[d->n_steps++] = st;
    return 0;
}

int qlt_decoder_parse(qlt_decoder *d, const cJSON *json, const char *file) {
    memset(d, 0, sizeof *d);
    if (!json || cJSON_IsNull(json)) return 0;
    d->present = 1;
    return parse_step(d, json, file);
}

void qlt_decoder_free(qlt_decoder *d) {
    for (int s = 0; s < d->n_steps; s++) {
        free(d->steps[s].pattern);
        free(d->steps[s].content);
    }
    memset(d, 0, sizeof *d);
}

/* ---- a list of strings ---- */

typedef struct strlist {
    char *buf;
    size_t len, cap;
    size_t *end; /* string i is buf[i ? end[i-1] : 0, end[i]) */
    int64_t n, cap_n;
} strlist;

static void sl_bytes(strlist *l, const void *s, size_t n) {
    if (l->len + n + 1 > l->cap) {
        l->cap = (l->len + n + 1) * 2;
        l->buf = qlt_xrealloc(l->buf, l->cap);
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

/* Ends the string being written (the bytes since the previous end). */
static void sl_close(strlist *l) {
    if (l->n == l->cap_n) {
        l->cap_n = l->cap_n ? l->cap_n * 2 : 64;
        l->end = qlt_xrealloc(l->end, (size_t)l->cap_n * sizeof *l->end);
    }
    l->end[l->n++] = l->len;
}

static void sl_add(strlist *l, const void *s, size_t n) {
    sl_bytes(l, s, n);
    sl_close(l);
}

static const char *sl_get(const strlist *l, int64_t i, size_t *n) {
    size_t start = i ? l->end[i - 1] : 0;
    *n = l->end[i] - start;
    return l->buf + start;
}

static void sl_free(strlist *l) {
    free(l->buf);
    free(l->end);
}

/* ---- the steps ---- */

static void byte_level(const strlist *in, strlist *out) {
    strlist raw = {0};
    uint8_t *tmp = NULL;
    size_t tmp_cap = 0;
    for (int64_t i = 0; i < in->n; i++) {
        size_t n;
        const char *t = sl_get(in, i, &n);
        if (n > tmp_cap) tmp = qlt_xrealloc(tmp, tmp_cap = n * 2);
        int64_t m = qlt_byte_level_decode(t, n, tmp);
        if (m >= 0) sl_bytes(&raw, tmp, (size_t)m);
        else sl_bytes(&raw, t, n);
    }
    size_t len;
    char *text = qlt_utf8_lossy(raw.buf ? raw.buf : "", raw.len, &len);
    sl_add(out, text, len);
    free(text);
    free(tmp);
    sl_free(&raw);
}

/* Replaces every `pat` in each string by `rep`; first_drop: in string 0, drop it instead. */
static void replace(const strlist *in, strlist *out, const char *pat, size_t pat_n, const char *rep, size_t rep_n,
                    int first_drop) {
    for (int64_t i = 0; i < in->n; i++) {
        size_t n;
        const char *t = sl_get(in, i, &n), *end = t + n;
        for (const char *hit; (hit = memmem(t, (size_t)(end - t), pat, pat_n)) != NULL; t = hit + pat_n) {
            sl_bytes(out, t, (size_t)(hit - t));
            if (!(first_drop && i == 0)) sl_bytes(out, rep, rep_n);
        }
        sl_bytes(out, t, (size_t)(end - t));
        sl_close(out);
    }
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The byte of a "<0xNN>" token, or -1. As tokenizers reads it (Rust's u8::from_str_radix of the two
 * characters after "<0x"), a '+' sign and either case of hex digit are accepted. */
static int fallback_byte(const char *t, size_t n) {
    if (n != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>') return -1;
    if (t[3] == '+') return hex_digit(t[4]);
    int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static void flush_bytes(strlist *out, const char *bytes, size_t n) {
    if (n == 0) return;
    if (qlt_utf8_valid(bytes, n, NULL)) {
        sl_add(out, bytes, n);
        return;
    }
    for (size_t k = 0; k < n; k++) sl_add(out, "\xef\xbf\xbd", 3);
}

static void byte_fallback(const strlist *in, strlist *out) {
    char *bytes = qlt_xmalloc((size_t)in->n + 1);
    size_t nb = 0;
    for (int64_t i = 0; i < in->n; i++) {
        size_t n;
        const char *t = sl_get(in, i, &n);
        int b = fallback_byte(t, n);
        if (b >= 0) {
            bytes[nb++] = (char)b;
            continue;
        }
        flush_bytes(out, bytes, nb);
        nb = 0;
        sl_add(out, t, n);
    }
    flush_bytes(out, bytes, nb);
    free(bytes);
}

/* Strip: at most start leading and stop trailing copies of the character c (cn bytes) removed. Where
 * they would overlap (tokenizers panics there) the string becomes empty. */
static void strip(const strlist *in, strlist *out, const char *c, size_t cn, int64_t start, int64_t stop) {
    for (int64_t i = 0; i < in->n; i++) {
        size_t n;
        const char *t = sl_get(in, i, &n);
        size_t a = 0, b = n;
        for (int64_t k = 0; k < start && a + cn <= n && memcmp(t + a, c, cn) == 0; k++) a += cn;
        for (int64_t k = 0; k < stop && b >= cn && memcmp(t + b - cn, c, cn) == 0; k++) b -= cn;
        sl_add(out, t + a, b > a ? b - a : 0);
    }
}

char *qlt_decoder_run(const qlt_decoder *d, const char *const *tok, const int32_t *tok_len, int64_t n,
                      size_t *out_len) {
    strlist cur = {0};
    for (int64_t i = 0; i < n; i++) sl_add(&cur, tok[i], (size_t)tok_len[i]);
    for (int s = 0; s < d->n_steps; s++) {
        const qlt_dec_step *st = &d->steps[s];
        strlist next = {0};
        switch (st->kind) {
        case QLT_DEC_BYTE_LEVEL: byte_level(&cur, &next); break;
        case QLT_DEC_METASPACE:
            replace(&cur, &next, st->content, st->content_len, " ", 1, st->prepend_scheme != QLT_PREPEND_NEVER);
            break;
        case QLT_DEC_REPLACE:
            replace(&cur, &next, st->pattern, st->pattern_len, st->content, st->content_len, 0);
            break;
        case QLT_DEC_BYTE_FALLBACK: byte_fallback(&cur, &next); break;
        case QLT_DEC_FUSE: sl_add(&next, cur.buf ? cur.buf : "", cur.len); break;
        case QLT_DEC_STRIP: strip(&cur, &next, st->content, st->content_len, st->start, st->stop); break;
        }
        sl_free(&cur);
        cur = next;
    }
    /* joined: with "" after a decoder, with " " when there is none */
    strlist joined = {0};
    for (int64_t i = 0; i < cur.n; i++) {
        size_t len;
        const char *t = sl_get(&cur, i, &len);
        if (i > 0 && !d->present) sl_bytes(&joined, " ", 1);
        sl_bytes(&joined, t, len);
    }
    sl_bytes(&joined, "", 0);
    joined.buf[joined.len] = '\0';
    *out_len = joined.len;
    sl_free(&cur);
    free(joined.end);
    return joined.buf;
}
