/* tokenizer_internal.h: the qlt_tokenizer struct, shared by tokenizer.c (loading) and
 * tokenizer_encode.c (encoding, decoding). Not for other modules: they use tokenizer.h. */
#ifndef QLT_TOKENIZER_INTERNAL_H
#define QLT_TOKENIZER_INTERNAL_H

#include <stdint.h>

#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalize.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

typedef struct qlt_added_token {
    char *content;
    int32_t len;
    int32_t id;
    int special;
    int normalized; /* matched after normalization instead of in the raw text */
} qlt_added_token;

struct qlt_tokenizer {
    qlt_bpe bpe;
    qlt_normalizer norm;
    qlt_pre_tokenizer pre;
    qlt_decoder dec;
    qlt_added_token *added; /* sorted by first byte, then longest first */
    int32_t n_added;
    int32_t added_first[257]; /* added[added_first[b] .. added_first[b+1]) start with byte b */
    int has_normalized_added;
    int32_t eos_id, pad_id;
    const char *chat_template; /* "chatml", "llama3", "mistral", "phi3" or NULL: tokenizer_config.json's template */
    uint64_t hash;
};

#endif
