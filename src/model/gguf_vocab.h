/* gguf_vocab.h: a byte-level BPE tokenizer.json (Llama 3, Qwen2/2.5/3) as the tokenizer.ggml.* metadata
 * llama.cpp reads, as its convert_hf_to_gguf.py writes it: model "gpt2"; the pre-tokenizer's name ("llama-bpe"
 * or "qwen2", known by their split regex); one string and one type per id up to config.json's vocab_size
 * (1 normal, 3 control for special added tokens and ones that look special such as <|...|>, 4 user-defined
 * for other added tokens, 5 unused for "[PAD<id>]" fillers of ids the tokenizer lacks); the merges as
 * "a b" strings; bos / eos / unknown / padding ids from tokenizer_config.json's *_token (by added-token
 * content), else config.json's *_token_id; add_bos_token / add_eos_token; the chat template. */
#ifndef QLT_GGUF_VOCAB_H
#define QLT_GGUF_VOCAB_H

#include <stdint.h>

#include "formats/gguf_write.h"

enum { QLT_GGUF_TOKEN_NORMAL = 1, QLT_GGUF_TOKEN_CONTROL = 3, QLT_GGUF_TOKEN_USER_DEFINED = 4, QLT_GGUF_TOKEN_UNUSED = 5 };

typedef struct qlt_gguf_vocab {
    int32_t n;             /* ids: config.json's vocab_size */
    char **tokens;         /* [n] */
    int32_t *types;        /* [n] QLT_GGUF_TOKEN_* */
    int64_t n_merges;
    char **merges;         /* [n_merges] "a b" */
    char pre[32];          /* tokenizer.ggml.pre */
    int32_t bos, eos, unk, pad; /* -1: none */
    int add_bos, add_eos;  /* -1: not said */
    char *chat_template;   /* NULL: none */
} qlt_gguf_vocab;

/* Reads tokenizer_json (tokenizer_config.json and chat_template.jinja beside it, when present) and
 * config_json_dir/config.json (the special ids it names). 0, or -1 with qlt_fail naming the file and key. */
int qlt_gguf_vocab_load(qlt_gguf_vocab *v, const char *tokenizer_json, const char *config_json_dir, int32_t vocab_size);
/* Adds the tokenizer.* keys to w. */
void qlt_gguf_vocab_add(const qlt_gguf_vocab *v, qlt_gguf_writer *w);
void qlt_gguf_vocab_free(qlt_gguf_vocab *v);

#endif
