/* pre_tokenizer.c: parsing and running the pre-tokenizer chain of pre_tokenizer.h. Running is
 * depth-first: step k cuts its piece and hands each part to step k+1 at once, so a step that rewrites
 * text (ByteLevel's prefix space, Metaspace) needs only its own buffer, reused piece after piece. */
#include "tokenizer/pre_tokenizer.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/error.h"
#include "tokenizer/utf8.h"

struct qlt_pre_state {
    void *match_data[QLT_PRE_MAX_STEPS];
    char *buf[QLT_PRE_MAX_STEPS];
    size_t buf_cap[QLT_PRE_MAX_STEPS];
};

static const char *json_string(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int json_bool(const cJSON *obj, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static int compile_regex(qlt_pre_step *st, const char *pattern, const char *file) {
    if (qlt_regex_compile(&st->regex, pattern) != 0) return qlt_fail_context("%s", file);
    st->has_regex = 1;
    return 0;
}

static int parse_split(qlt_pre_step *st, const cJSON *json, const char *file) {
    const char *behavior = json_string(json, "behavior");
    st->behavior = behavior ? qlt_split_behavior_parse(behavior) : 0;
    if (!st->behavior)
        return qlt_fail("%s: pre_tokenizer Split behavior \"%s\" is not one of Isolated, Removed, MergedWithPrevious, "
                        "MergedWithNext, Contiguous", file, behavior ? behavior : "(none)");
    st->invert = json_bool(json, "invert", 0);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(json, "pattern");
    const char *regex = json_string(pat, "Regex"), *literal = json_string(pat, "String");
    if (regex) return compile_regex(st, regex, file);
    if (!literal) return qlt_fail("%s: pre_tokenizer Split has no pattern.Regex or pattern.String", file);
    char *quoted = qlt_xmalloc(strlen(literal) + 5);
    strcpy(quoted, "\\Q");
    strcat(quoted, literal);
    strcat(quoted, "\\E");
    int r = compile_regex(st, quoted, file);
    free(quoted);
    return r;
}

static int parse_metaspace(qlt_pre_step *st, const cJSON *json, const char *file) {
    const char *rep = json_string(json, "replacement");
    if (!rep) rep = "\xe2\x96\x81"; /* ▁ U+2581, the default */
    size_t n = strlen(rep);
    if (n == 0 || n > 4 || qlt_utf8_char_len((unsigned char)rep[0]) != n)
        return qlt_fail("%s: pre_tokenizer Metaspace replacement \"%s\" is not one character", file, rep);
    memcpy(st->replacement, rep, n + 1);
    st->replacement_len = n;
    const char *scheme = json_string(json, "prepend_scheme");
    if (!scheme) /* files older than prepend_scheme: add_prefix_space (default true) */
        st->prepend_scheme = json_bool(json, "add_prefix_space", 1) ? QLT_PREPEND_ALWAYS : QLT_PREPEND_NEVER;
    else if (strcmp(scheme, "always") == 0) st->prepend_scheme = QLT_PREPEND_ALWAYS;
    else if (strcmp(scheme, "first") == 0) st->prepend_scheme = QLT_PREPEND_FIRST;
    else if (strcmp(scheme, "never") == 0) st->prepend_scheme = QLT_PREPEND_NEVER;
    else
        return qlt_fail("%s: pre_tokenizer Metaspace prepend_scheme \"%s\" is not first, always or never", file,
                        scheme);
    st->split = json_bool(json, "split", 1);
    return 0;
}

int qlt_pre_tokenizer_parse(qlt_pre_tokenizer *p, const cJSON *json, const char *file) {
    if (!json || cJSON_IsNull(json)) return 0;
    const char *type = json_string(json, "type");
    if (!type) return qlt_fail("%s: pre_tokenizer has no \"type\"", file);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "pretokenizers");
        for (const cJSON *c = cJSON_IsArray(list) ? list->child : NULL; c; c = c->next)
            QLT_TRY(qlt_pre_tokenizer_parse(p, c, file));
        return 0;
    }
    if (p->byte_level)
        return qlt_fail("%s: pre_tokenizer %s after ByteLevel is not supported (ByteLevel must come last)", file, type);
    if (p->n_steps == QLT_PRE_MAX_STEPS) return qlt_fail("%s: more than %d pre-tokenizers", file, QLT_PRE_MAX_STEPS);
    qlt_pre_step *st = &p->steps[p->n_steps];
    memset(st, 0, sizeof *st);
    int r;
    if (strcmp(type, "Split") == 0) {
        st->kind = QLT_PRE_SPLIT;
        r = parse_split(st, json, file);
    } else if (strcmp(type, "Digits") == 0) {
        st->kind = QLT_PRE_DIGITS;
        st->individual_digits = json_bool(json, "individual_digits", 0);
        r = 0;
    } else if (strcmp(type, "ByteLevel") == 0) {
        st->kind = QLT_PRE_BYTE_LEVEL;
        st->add_prefix_space = json_bool(json, "add_prefix_space", 0);
        st->behavior = QLT_SPLIT_ISOLATED;
        r = json_bool(json, "use_regex", 1) ? compile_regex(st, QLT_GPT2_PATTERN, file) : 0;
        p->byte_level = 1;
    } else if (strcmp(type, "Metaspace") == 0) {
        st->kind = QLT_PRE_METASPACE;
        r = parse_metaspace(st, json, file);
    } else {
        return qlt_fail("%s: pre_tokenizer type \"%s\" is not supported (supported: Split, Digits, "
                        "ByteLevel, Metaspace, and a Sequence of them)", file, type);
    }
    if (r != 0) return r;
    p->n_steps++;
    return 0;
}

void qlt_pre_tokenizer_free(qlt_pre_tokenizer *p) {
    for (int k = 0; k < p->n_steps; k++)
        if (p->steps[k].has_regex) qlt_regex_free(&p->steps[k].regex);
    memset(p, 0, sizeof *p);
}

qlt_pre_state *qlt_pre_state_new(const qlt_pre_tokenizer *p) {
    qlt_pre_state *s = qlt_xcalloc(1, sizeof *s);
    for (int k = 0; k < p->n_steps; k++)
        if (p->steps[k].has_regex) s->match_data[k] = qlt_regex_match_data(&p->steps[k].regex);
    return s;
}

void qlt_pre_state_free(qlt_pre_state *s) {
    if (!s) return;
    for (int k = 0; k < QLT_PRE_MAX_STEPS; k++) {
        if (s->match_data[k]) qlt_regex_match_data_free(s->match_data[k]);
        free(s->buf[k]);
    }
    free(s);
}

/* The call of step k on one piece: where its parts go. */
typedef struct run_ctx {
    const qlt_pre_tokenizer *p;
    qlt_pre_state *s;
    int k;
    const char *base; /* the piece step k was given: a part at base starts where the piece starts */
    int at_start;
    qlt_word_fn fn;
    void *fn_ctx;
} run_ctx;

static int run_step(const run_ctx *c, const char *text, size_t len, int at_start);

/* A part that step c->k cut from its piece: on to the next step. */
static int on_part(void *ctx, const char *part, size_t len) {
    const run_ctx *c = ctx;
    return run_step(&(run_ctx){c->p, c->s, c->k + 1, NULL, 0, c->fn, c->fn_ctx}, part, len,
                    c->at_start && part == c->base);
}

static char *step_buffer(qlt_pre_state *s, int k, size_t need) {
    if (need > s->buf_cap[k]) {
        s->buf_cap[k] = need * 2;
        s->buf[k] = qlt_xrealloc(s->buf[k], s->buf_cap[k]);
    }
    return s->buf[k];
}

static int is_numeric(const char *c, size_t *n) {
    uint32_t cp;
    *n = qlt_utf8_decode(c, &cp);
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

/* Digits: numeric characters isolated, one by one or in runs; the text between them as it is. */
static int split_digits(const run_ctx *c, const char *text, size_t len, int individual) {
    size_t start = 0, i = 0;
    while (i < len) {
        size_t n;
        if (!is_numeric(text + i, &n)) {
            i += n;
            continue;
        }
        size_t end = i + n;
        if (!individual) {
            size_t m;
            while (end < len && is_numeric(text + end, &m)) end += m;
        }
        if (i > start) QLT_TRY(on_part((void *)c, text + start, i - start));
        QLT_TRY(on_part((void *)c, text + i, end - i));
        start = i = end;
    }
    return len > start ? on_part((void *)c, text + start, len - start) : 0;
}

/* Metaspace: spaces replaced, the replacement prepended (by the scheme), then cut before each one. */
static int metaspace(const run_ctx *c, const qlt_pre_step *st, const char *text, size_t len, int at_start) {
    const char *rep = st->replacement;
    size_t rn = st->replacement_len, spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    char *buf = step_buffer(c->s, c->k, len + spaces * (rn - 1) + rn + 1), *o = buf;
    int starts_with_rep = len >= rn && memcmp(text, rep, rn) == 0;
    if (!starts_with_rep && len > 0 && text[0] == ' ') starts_with_rep = 1; /* it will, once replaced */
    int prepend = st->prepend_scheme == QLT_PREPEND_ALWAYS || (st->prepend_scheme == QLT_PREPEND_FIRST && at_start);
    if (prepend && !starts_with_rep) {
        memcpy(o, rep, rn);
        o += rn;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(o, rep, rn);
            o += rn;
        } else {
            *o++ = text[i];
        }
    }
    size_t n = (size_t)(o - buf);
    run_ctx sub = *c;
    sub.base = buf;
    sub.at_start = at_start;
    if (!st->split) return on_part(&sub, buf, n);
    size_t start = 0;
    for (size_t i = 0; i + rn <= n;) {
        if (memcmp(buf + i, rep, rn) == 0) {
            if (i > start) QLT_TRY(on_part(&sub, buf + start, i - start));
            start = i;
            i += rn;
        } else {
            i++;
        }
    }
    return n > start ? on_part(&sub, buf + start, n - start) : 0;
}

static int run_step(const run_ctx *c, const char *text, size_t len, int at_start) {
    if (len == 0) return 0;
    if (c->k == c->p->n_steps) return c->fn(c->fn_ctx, text, len);
    const qlt_pre_step *st = &c->p->steps[c->k];
    run_ctx sub = *c;
    sub.base = text;
    sub.at_start = at_start;
    switch (st->kind) {
    case QLT_PRE_DIGITS: return split_digits(&sub, text, len, st->individual_digits);
    case QLT_PRE_METASPACE: return metaspace(c, st, text, len, at_start);
    case QLT_PRE_BYTE_LEVEL:
        if (st->add_prefix_space && text[0] != ' ') {
            char *buf = step_buffer(c->s, c->k, len + 1);
            buf[0] = ' ';
            memcpy(buf + 1, text, len);
            text = sub.base = buf;
            len++;
        }
        if (!st->has_regex) return on_part(&sub, text, len);
        /* fall through */
    case QLT_PRE_SPLIT:
        return qlt_regex_split(&st->regex, c->s->match_data[c->k], text, len, st->behavior, st->invert, on_part, &sub);
    }
    return 0;
}

int qlt_pre_tokenize(const qlt_pre_tokenizer *p, qlt_pre_state *s, const char *text, size_t len, int at_start,
                     qlt_word_fn fn, void *ctx) {
    run_ctx c = {p, s, 0, text, at_start, fn, ctx};
    return run_step(&c, text, len, at_start);
}
