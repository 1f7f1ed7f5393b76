/* normalize.c: qlt_normalize over utf8proc_map (see normalize.h). */
#include "tokenizer/normalize.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/utf8.h"

#include "common/error.h"

qlt_norm_form qlt_norm_form_parse(const char *name) {
    if (strcmp(name, "NFC") == 0) return QLT_NORM_NFC;
    if (strcmp(name, "NFD") == 0) return QLT_NORM_NFD;
    if (strcmp(name, "NFKC") == 0) return QLT_NORM_NFKC;
    if (strcmp(name, "NFKD") == 0) return QLT_NORM_NFKD;
    return 0;
}

static int is_ascii(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

int qlt_normalize(const qlt_normalizer *n, const char *text, size_t len, char **out, size_t *out_len, int *owned) {
    *out = (char *)text;
    *out_len = len;
    *owned = 0;
    if (n->n_steps == 0 || is_ascii(text, len)) return 0;
    size_t bad;
    if (!qlt_utf8_valid(text, len, &bad)) return qlt_fail("text is not valid UTF-8 at byte %zu", bad);
    for (int s = 0; s < n->n_steps; s++) {
        utf8proc_option_t opt = UTF8PROC_STABLE;
        switch (n->steps[s]) {
        case QLT_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
        case QLT_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
        case QLT_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        case QLT_NORM_NFKD: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
        }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)*out, (utf8proc_ssize_t)*out_len, &dst, opt);
        if (r < 0) {
            if (*owned) free(*out);
            return qlt_fail("Unicode normalization failed: %s", utf8proc_errmsg(r));
        }
        if (*owned) free(*out);
        *out = (char *)dst;
        *out_len = (size_t)r;
        *owned = 1;
    }
    return 0;
}
