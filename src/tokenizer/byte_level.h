/* byte_level.h: GPT-2's byte-level alphabet: each of the 256 bytes is shown as one printable Unicode
 * character (printable Latin-1 bytes stand for themselves, the others become U+0100 upward in byte
 * order), so a vocabulary of strings can hold any byte sequence. The tokenizer converts vocabulary
 * entries back to raw bytes once at load and then works on bytes only. */
#ifndef QLT_BYTE_LEVEL_H
#define QLT_BYTE_LEVEL_H

#include <stddef.h>
#include <stdint.h>

/* The code point that stands for byte b. */
uint32_t qlt_byte_level_char(uint8_t b);
/* The byte a code point stands for, or -1 when c is not in the alphabet. */
int qlt_byte_level_byte(uint32_t c);
/* Converts a byte-level string (UTF-8 of alphabet characters) to raw bytes in out (room for len
 * bytes is enough). Returns the byte count, or -1 when s holds a character outside the alphabet or
 * invalid UTF-8. */
int64_t qlt_byte_level_decode(const char *s, size_t len, uint8_t *out);
/* Writes the byte-level string of len raw bytes into out (room for 2*len bytes); returns its length. */
size_t qlt_byte_level_encode(const uint8_t *raw, size_t len, char *out);

#endif
