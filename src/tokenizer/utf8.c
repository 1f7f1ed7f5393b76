/* utf8.c: qlt_utf8_valid and qlt_utf8_lossy (see utf8.h). Both follow the Unicode table of well-formed
 * byte sequences (no overlongs, no surrogates, nothing above U+10FFFF). */
#include "tokenizer/utf8.h"

#include <stdint.h>
#include <string.h>

#include "common/error.h"

/* Length of the valid sequence at p (1..4), or 0 with *consumed = bytes of its maximal invalid subpart. */
static size_t seq_len(const unsigned char *p, size_t avail, size_t *consumed) {
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) { n = 3; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    else { *consumed = 1; return 0; }
    size_t k = 1;
    for (; k < n && k < avail; k++) {
        unsigned b = p[k];
        if (k == 1 ? (b < lo || b > hi) : (b & 0xc0) != 0x80) break;
    }
    if (k == n) return n;
    *consumed = k;
    return 0;
}

int qlt_utf8_valid(const char *s, size_t len, size_t *bad_offset) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (i + 8 <= len) { /* 8 ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, p + i, 8);
            if ((w & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        size_t consumed, n = seq_len(p + i, len - i, &consumed);
        if (n == 0) {
            if (bad_offset) *bad_offset = i;
            return 0;
        }
        i += n;
    }
    return 1;
}

char *qlt_utf8_lossy(const char *s, size_t len, size_t *out_len) {
    const unsigned char *p = (const unsigned char *)s;
    char *out = qlt_xmalloc(len * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t consumed, n = seq_len(p + i, len - i, &consumed);
        if (n) {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += consumed;
        }
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

size_t qlt_utf8_decode(const char *s, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = qlt_utf8_char_len(p[0]);
    static const unsigned char lead_mask[5] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    uint32_t c = p[0] & lead_mask[n];
    for (size_t k = 1; k < n; k++) c = (c << 6) | (p[k] & 0x3f);
    *cp = c;
    return n;
}
