/* decoder.h: the decoder of a tokenizer.json, which turns the token strings of an id sequence back into
 * text exactly as `tokenizers`' decode does: a chain of steps, each mapping the list of strings to a new
 * list, the result joined (no decoder at all: the tokens joined with " "). Steps:
 *   ByteLevel     every token's GPT-2-alphabet characters back to bytes (a token with a character outside
 *                 the alphabet stays as its UTF-8), all joined, invalid UTF-8 repaired with U+FFFD;
 *   Metaspace     the replacement character becomes " ", except in the first token, where it is dropped
 *                 (unless prepend_scheme is never);
 *   Replace       a literal string replaced in every token ("▁" -> " ");
 *   ByteFallback  runs of <0xNN> tokens become their bytes when those are valid UTF-8, else one U+FFFD
 *                 per byte;
 *   Fuse          all tokens joined into one;
 *   Strip         up to `start` leading and `stop` trailing `content` characters removed from each token.
 * Added tokens (special or not) go through the chain like the others. */
#ifndef QLT_DECODER_H
#define QLT_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/pre_tokenizer.h"

typedef struct cJSON cJSON;

enum { QLT_DEC_MAX_STEPS = 16 };

typedef enum qlt_dec_kind {
    QLT_DEC_BYTE_LEVEL = 1,
    QLT_DEC_METASPACE,
    QLT_DEC_REPLACE,
    QLT_DEC_BYTE_FALLBACK,
    QLT_DEC_FUSE,
    QLT_DEC_STRIP,
} qlt_dec_kind;

typedef struct qlt_dec_step {
    qlt_dec_kind kind;
    char *pattern, *content; /* REPLACE: both; METASPACE and STRIP: content is the one character */
    size_t pattern_len, content_len;
    int64_t start, stop;              /* STRIP */
    qlt_prepend_scheme prepend_scheme; /* METASPACE */
} qlt_dec_step;

typedef struct qlt_decoder {
    int present; /* 0: no decoder (tokens joined with " ") */
    int n_steps;
    qlt_dec_step steps[QLT_DEC_MAX_STEPS];
} qlt_decoder;

/* Reads a tokenizer.json decoder object (NULL: none) into d. Errors name `file`. */
int qlt_decoder_parse(qlt_decoder *d, const cJSON *json, const char *file);
void qlt_decoder_free(qlt_decoder *d);
/* Decodes n token strings (tok[i], tok_len[i] bytes) into a new NUL-terminated string of *out_len bytes. */
char *qlt_decoder_run(const qlt_decoder *d, const char *const *tok, const int32_t *tok_len, int64_t n,
                      size_t *out_len);

#endif
