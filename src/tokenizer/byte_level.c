/* byte_level.c: the byte <-> character bijection of byte-level BPE (see byte_level.h). Computed, not
 * tabulated: bytes 33..126, 161..172 and 174..255 are themselves; the 68 others, in increasing order,
 * are U+0100 + their rank among the others. */
#include "tokenizer/byte_level.h"

static int byte_is_printable(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

uint32_t qlt_byte_level_char(uint8_t b) {
    if (byte_is_printable(b)) return b;
    if (b <= 32) return 256u + b;                /* 0..32: ranks 0..32 */
    if (b <= 160) return 256u + 33u + (b - 127u); /* 127..160: ranks 33..66 */
    return 256u + 67u;                            /* 173 */
}

int qlt_byte_level_byte(uint32_t c) {
    if (c < 256) return byte_is_printable(c) ? (int)c : -1;
    if (c < 256 + 33) return (int)(c - 256);
    if (c < 256 + 67) return (int)(c - 256 - 33 + 127);
    if (c == 256 + 67) return 173;
    return -1;
}

int64_t qlt_byte_level_decode(const char *s, size_t len, uint8_t *out) {
    const unsigned char *p = (const unsigned char *)s;
    int64_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        if (p[i] < 0x80) {
            c = p[i++];
        } else if ((p[i] & 0xe0) == 0xc0 && i + 1 < len && (p[i + 1] & 0xc0) == 0x80) {
            c = ((uint32_t)(p[i] & 0x1f) << 6) | (p[i + 1] & 0x3f);
            i += 2;
        } else {
            return -1; /* the alphabet lies below U+0800: anything longer is not in it */
        }
        int b = qlt_byte_level_byte(c);
        if (b < 0) return -1;
        out[n++] = (uint8_t)b;
    }
    return n;
}

size_t qlt_byte_level_encode(const uint8_t *raw, size_t len, char *out) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t c = qlt_byte_level_char(raw[i]);
        if (c < 0x80) {
            out[n++] = (char)c;
        } else {
            out[n++] = (char)(0xc0 | (c >> 6));
            out[n++] = (char)(0x80 | (c & 0x3f));
        }
    }
    return n;
}
