/* normalize.h: the normalizers a tokenizer.json may name, applied in order: the Unicode forms (NFC, NFD,
 * NFKC, NFKD, done by utf8proc; pure-ASCII text skips them), `Replace` of a literal string (SentencePiece
 * files turn " " into "▁") and `Prepend` (a string put before any non-empty text), in any `Sequence`.
 * Parsed from the tokenizer.json "normalizer" object here, so the supported set lives in one place. */
#ifndef QLT_NORMALIZE_H
#define QLT_NORMALIZE_H

#include <stddef.h>

typedef struct cJSON cJSON;

enum { QLT_NORM_MAX_STEPS = 16 };

typedef enum qlt_norm_kind {
    QLT_NORM_NFC = 1,
    QLT_NORM_NFD,
    QLT_NORM_NFKC,
    QLT_NORM_NFKD,
    QLT_NORM_REPLACE, /* every non-overlapping `pattern`, left to right, becomes `content` */
    QLT_NORM_PREPEND, /* `content` before the text, unless the text is empty */
} qlt_norm_kind;

typedef struct qlt_norm_step {
    qlt_norm_kind kind;
    char *pattern, *content; /* REPLACE: both; PREPEND: content */
    size_t pattern_len, content_len;
} qlt_norm_step;

typedef struct qlt_normalizer {
    int n_steps; /* 0 = no normalizer */
    qlt_norm_step steps[QLT_NORM_MAX_STEPS];
} qlt_normalizer;

/* Appends the steps of a tokenizer.json normalizer object (NULL: none) to n. Errors name `file` and
 * the unsupported type. */
int qlt_normalizer_parse(qlt_normalizer *n, const cJSON *json, const char *file);
void qlt_normalizer_free(qlt_normalizer *n);
/* Normalizes len bytes of valid UTF-8. *out is either `text` itself (nothing changed; *owned = 0) or
 * a new buffer the caller frees (*owned = 1). */
int qlt_normalize(const qlt_normalizer *n, const char *text, size_t len, char **out, size_t *out_len, int *owned);

#endif
