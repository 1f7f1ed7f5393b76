/* regex_split.c: PCRE2 glue for the Split pre-tokenizer (see regex_split.h). The text was validated
 * as UTF-8 by the caller, so matching skips PCRE2's own check (PCRE2_NO_UTF_CHECK).
 *
 * Hugging Face matches with Oniguruma, whose \s is Unicode's White_Space property; PCRE2's \s also
 * takes U+180E (MONGOLIAN VOWEL SEPARATOR, a space before Unicode 6.3). So \s and \S are spelled out
 * as White_Space before compiling. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_split.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define WHITE_SPACE "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* The pattern with \s (and \S outside classes) replaced by White_Space; a new string. */
static char *spell_out_white_space(const char *pattern) {
    size_t n = strlen(pattern);
    char *out = qlt_xmalloc(n * (sizeof WHITE_SPACE + 3) + 1), *o = out;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pattern[i];
        if (c == '\\' && i + 1 < n) {
            char e = pattern[++i];
            if (e == 's' || (e == 'S' && !in_class)) {
                if (!in_class) o += sprintf(o, e == 's' ? "[" : "[^");
                o += sprintf(o, "%s", WHITE_SPACE);
                if (!in_class) *o++ = ']';
            } else {
                *o++ = c;
                *o++ = e;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            *o++ = c;
            if (pattern[i + 1] == '^') *o++ = pattern[++i];
            if (pattern[i + 1] == ']') *o++ = pattern[++i]; /* a leading ] is literal */
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        *o++ = c;
    }
    *o = '\0';
    return out;
}

int qlt_regex_compile(qlt_regex *p, const char *pattern) {
    memset(p, 0, sizeof *p);
    int err;
    PCRE2_SIZE off;
    char *spelled = spell_out_white_space(pattern);
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)spelled, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                                     &off, NULL);
    free(spelled);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return qlt_fail("pre-tokenizer regex does not compile at offset %zu: %s (pattern: %s)", (size_t)off,
                        (const char *)msg, pattern);
    }
    p->code = code;
    p->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void qlt_regex_free(qlt_regex *p) {
    pcre2_code_free(p->code);
    p->code = NULL;
}

void *qlt_regex_match_data(const qlt_regex *p) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code, NULL);
    QLT_ASSERT(md != NULL);
    return md;
}

void qlt_regex_match_data_free(void *match_data) { pcre2_match_data_free(match_data); }

/* Returns a callback's non-zero result as it is. */
#define TRY_RC(expr)                                                                                \
    do {                                                                                            \
        int rc_ = (expr);                                                                           \
        if (rc_ != 0) return rc_;                                                                   \
    } while (0)

qlt_split_behavior qlt_split_behavior_parse(const char *name) {
    static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (strcmp(name, names[i]) == 0) return (qlt_split_behavior)(i + 1);
    return 0;
}

/* Turns the stream of segments (a match or a gap, in order) into words. At most one word is held back
 * (`held`): the last one, while a following segment may still join it. */
typedef struct word_sink {
    qlt_split_behavior behavior;
    qlt_word_fn fn;
    void *ctx;
    const char *text;
    int held;           /* a word [start, end) is held back */
    size_t start, end;
    int last_match;     /* the previous segment was a match (false before the first) */
    int held_joinable;  /* MergedWithNext: the held word is a lone match that a gap after it joins */
} word_sink;

static int sink_flush(word_sink *w) {
    if (!w->held) return 0;
    w->held = 0;
    return w->fn(w->ctx, w->text + w->start, w->end - w->start);
}

static int sink_hold(word_sink *w, size_t start, size_t end) {
    TRY_RC(sink_flush(w));
    w->held = 1;
    w->start = start;
    w->end = end;
    return 0;
}

static int sink_segment(word_sink *w, size_t start, size_t end, int match) {
    int r = 0, prev = w->last_match;
    w->last_match = match;
    switch (w->behavior) {
    case QLT_SPLIT_ISOLATED: return w->fn(w->ctx, w->text + start, end - start);
    case QLT_SPLIT_REMOVED: return match ? 0 : w->fn(w->ctx, w->text + start, end - start);
    case QLT_SPLIT_CONTIGUOUS:
        if (w->held && match == prev) w->end = end;
        else r = sink_hold(w, start, end);
        return r;
    case QLT_SPLIT_MERGED_WITH_PREVIOUS:
        if (w->held && match && !prev) w->end = end;
        else r = sink_hold(w, start, end);
        return r;
    case QLT_SPLIT_MERGED_WITH_NEXT:
        if (w->held && w->held_joinable && !match) {
            w->end = end;
            w->held_joinable = 0;
            return sink_flush(w);
        }
        r = sink_hold(w, start, end);
        w->held_joinable = match;
        return r;
    }
    return 0;
}

int qlt_regex_split(const qlt_regex *p, void *match_data, const char *text, size_t len, qlt_split_behavior behavior,
                    int invert, qlt_word_fn fn, void *ctx) {
    const pcre2_code *code = p->code;
    pcre2_match_data *md = match_data;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    word_sink w = {.behavior = behavior, .fn = fn, .ctx = ctx, .text = text};
    int is_match = !invert, is_gap = invert;
    size_t pos = 0, emitted = 0;
    while (pos < len) {
        int rc = p->jit ? pcre2_jit_match(code, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, md, NULL)
                        : pcre2_match(code, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return qlt_fail("pre-tokenizer regex failed at byte %zu: %s", pos, (const char *)msg);
        }
        size_t start = ov[0], end = ov[1];
        if (end == start) { /* an empty match: step over one character */
            pos = start + 1;
            while (pos < len && ((unsigned char)text[pos] & 0xc0) == 0x80) pos++;
            continue;
        }
        if (start > emitted) TRY_RC(sink_segment(&w, emitted, start, is_gap));
        TRY_RC(sink_segment(&w, start, end, is_match));
        emitted = pos = end;
    }
    if (len > emitted) TRY_RC(sink_segment(&w, emitted, len, is_gap));
    return sink_flush(&w);
}
