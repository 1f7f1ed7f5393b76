/* generate.h: text out of a model for one prompt: encoded (as a user turn of a chat template, or raw), decoded
 * with the KV cache, sampled token by token, stopped at end of turn / end of text or a length, and turned back
 * into text (streamed as it comes when asked). What `qlora-train generate` and the trainer's sample answers
 * share. */
#ifndef QLT_GENERATE_H
#define QLT_GENERATE_H

#include <stdio.h>

#include "common/rng.h"
#include "config/config.h"
#include "infer/sample.h"
#include "model/lora.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct qlt_generate_opts {
    int max_new_tokens;
    qlt_sample_opts sample;
    int chat;               /* 1: the prompt is a user turn of tmpl (with `system` before it when not NULL) */
    qlt_chat_template tmpl; /* a resolved template (chatml or llama3) when chat */
    const char *system;
} qlt_generate_opts;

typedef struct qlt_generation {
    int64_t prompt_tokens, new_tokens;
    double prefill_s, decode_s; /* wall time of the prompt and of the new tokens */
    const char *stop;           /* "eos" (an end token) or "length" */
    char *text;                 /* the new text (heap) */
} qlt_generation;

/* Generates for prompt; streams the text to `stream` as it comes when not NULL. lora may be NULL. 0, or -1 with
 * qlt_fail. */
int qlt_generate(const qlt_model *m, const qlt_lora *lora, const qlt_tokenizer *tok, const qlt_generate_opts *o,
                 const char *prompt, qlt_rng *rng, FILE *stream, qlt_generation *out);
void qlt_generation_free(qlt_generation *g);

#endif
