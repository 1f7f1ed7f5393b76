/* normalize.h: the Unicode normalizers a tokenizer.json may name (NFC, NFD, NFKC, NFKD, or a Sequence
 * of them), done by utf8proc. Pure-ASCII text is unchanged by all four and skips the work. */
#ifndef QLT_NORMALIZE_H
#define QLT_NORMALIZE_H

#include <stddef.h>

enum { QLT_NORM_MAX_STEPS = 4 };

typedef enum qlt_norm_form { QLT_NORM_NFC = 1, QLT_NORM_NFD, QLT_NORM_NFKC, QLT_NORM_NFKD } qlt_norm_form;

typedef struct qlt_normalizer {
    int n_steps; /* 0 = no normalizer */
    qlt_norm_form steps[QLT_NORM_MAX_STEPS];
} qlt_normalizer;

/* Parses a normalizer type name ("NFC", ...); 0 when it is not one of the four. */
qlt_norm_form qlt_norm_form_parse(const char *name);
/* Normalizes len bytes of UTF-8. *out is either `text` itself (nothing to do; *owned = 0) or a new
 * buffer the caller frees (*owned = 1). Fails on invalid UTF-8, naming the byte offset. */
int qlt_normalize(const qlt_normalizer *n, const char *text, size_t len, char **out, size_t *out_len, int *owned);

#endif
