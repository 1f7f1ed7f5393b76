/* pre_tokenizer.h: the pre-tokenizer of a tokenizer.json, a chain of steps that cut normalized text into
 * the words BPE merges within. Each step cuts every piece the step before it made, as `tokenizers`'
 * Sequence does:
 *   Split      a regex or string, any behavior, inverted or not (regex_split.h; Qwen, Llama-3);
 *   Digits     each numeric character (Unicode Nd, Nl, No) its own piece, or runs of them
 *              (individual_digits false) (SmolLM2);
 *   ByteLevel  a space before each piece that lacks one (add_prefix_space), then the GPT-2 regex
 *              (use_regex); marks the model as byte-level: its vocabulary spells bytes in GPT-2's
 *              alphabet. Nothing may follow it (every step before it sees raw text);
 *   Metaspace  spaces become the replacement character ("▁"), which is put before the piece by
 *              prepend_scheme (always; first: only the piece that starts the input; never) unless the
 *              piece starts with it, then (split) a cut before each replacement character
 *              (Llama-2 / Mistral / Gemma style).
 * Parsed from the "pre_tokenizer" object here; the state that running it needs is per thread. */
#ifndef QLT_PRE_TOKENIZER_H
#define QLT_PRE_TOKENIZER_H

#include <stddef.h>

#include "tokenizer/regex_split.h"

typedef struct cJSON cJSON;

enum { QLT_PRE_MAX_STEPS = 8 };

typedef enum qlt_pre_kind { QLT_PRE_SPLIT = 1, QLT_PRE_DIGITS, QLT_PRE_BYTE_LEVEL, QLT_PRE_METASPACE } qlt_pre_kind;
typedef enum qlt_prepend_scheme { QLT_PREPEND_ALWAYS = 1, QLT_PREPEND_FIRST, QLT_PREPEND_NEVER } qlt_prepend_scheme;

typedef struct qlt_pre_step {
    qlt_pre_kind kind;
    int has_regex;          /* SPLIT; BYTE_LEVEL with use_regex */
    qlt_regex regex;
    qlt_split_behavior behavior; /* SPLIT (ByteLevel's regex: Isolated) */
    int invert;
    int individual_digits;  /* DIGITS */
    int add_prefix_space;   /* BYTE_LEVEL */
    char replacement[8];    /* METASPACE: the replacement character's UTF-8, NUL-terminated */
    size_t replacement_len;
    qlt_prepend_scheme prepend_scheme;
    int split;
} qlt_pre_step;

typedef struct qlt_pre_tokenizer {
    int n_steps; /* 0: the whole text is one word */
    qlt_pre_step steps[QLT_PRE_MAX_STEPS];
    int byte_level; /* the last step is ByteLevel */
} qlt_pre_tokenizer;

typedef struct qlt_pre_state qlt_pre_state;

/* Appends the steps of a tokenizer.json pre_tokenizer object (NULL: none) to p. Errors name `file`. */
int qlt_pre_tokenizer_parse(qlt_pre_tokenizer *p, const cJSON *json, const char *file);
void qlt_pre_tokenizer_free(qlt_pre_tokenizer *p);

/* Per-thread working state (regex match data, one buffer per step that rewrites its pieces). */
qlt_pre_state *qlt_pre_state_new(const qlt_pre_tokenizer *p);
void qlt_pre_state_free(qlt_pre_state *s);
/* Cuts len bytes of valid UTF-8 into words, calling fn on each (never on an empty one). at_start: the
 * text begins the input (what Metaspace's "first" asks). Returns 0, fn's first non-zero return, or -1
 * with the error recorded. */
int qlt_pre_tokenize(const qlt_pre_tokenizer *p, qlt_pre_state *s, const char *text, size_t len, int at_start,
                     qlt_word_fn fn, void *ctx);

#endif
