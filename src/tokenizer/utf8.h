/* utf8.h: UTF-8 validation (the regex engine and JSON output need valid text) and the lossy repair
 * decoded byte sequences get (like Rust's String::from_utf8_lossy, which Hugging Face's decoder uses:
 * each maximal invalid subpart becomes one U+FFFD). */
#ifndef QLT_UTF8_H
#define QLT_UTF8_H

#include <stddef.h>

/* 1 when s is valid UTF-8; otherwise 0 and *bad_offset (when not NULL) is the first invalid byte. */
int qlt_utf8_valid(const char *s, size_t len, size_t *bad_offset);
/* Writes s with every invalid subpart replaced by U+FFFD into a new NUL-terminated buffer. */
char *qlt_utf8_lossy(const char *s, size_t len, size_t *out_len);

#endif
