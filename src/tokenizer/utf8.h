/* utf8.h: UTF-8 validation (the regex engine and JSON output need valid text) and the lossy repair
 * decoded byte sequences get (like Rust's String::from_utf8_lossy, which Hugging Face's decoder uses:
 * each maximal invalid subpart becomes one U+FFFD). */
#ifndef QLT_UTF8_H
#define QLT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* 1 when s is valid UTF-8; otherwise 0 and *bad_offset (when not NULL) is the first invalid byte. */
int qlt_utf8_valid(const char *s, size_t len, size_t *bad_offset);
/* The code point at s[0] of valid UTF-8 (len >= 1 bytes left) into *cp; returns its length in bytes. */
size_t qlt_utf8_decode(const char *s, uint32_t *cp);
/* Length in bytes of the valid UTF-8 character that starts with byte b. */
static inline size_t qlt_utf8_char_len(unsigned char b) { return b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4; }
/* Writes s with every invalid subpart replaced by U+FFFD into a new NUL-terminated buffer. */
char *qlt_utf8_lossy(const char *s, size_t len, size_t *out_len);

#endif
