/* regex_split.h: the regex of a `Split` pre-tokenizer (and of ByteLevel's use_regex) in a Hugging Face
 * tokenizer.json: compiled with PCRE2 in UTF + Unicode-property mode, JIT when available, it cuts text
 * into words with behavior "Isolated": both the matches and the text between them are words, in order.
 * pre_tokenizer.h chains it with the other pre-tokenizers. */
#ifndef QLT_REGEX_SPLIT_H
#define QLT_REGEX_SPLIT_H

#include <stddef.h>

/* The GPT-2 pattern, used by a ByteLevel pre-tokenizer with use_regex: true. */
#define QLT_GPT2_PATTERN                                                                            \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct qlt_regex {
    void *code; /* pcre2_code_8 */
    int jit;    /* JIT-compiled */
} qlt_regex;

/* Called once per word; a non-zero return stops the split and is returned by it. */
typedef int (*qlt_word_fn)(void *ctx, const char *word, size_t len);

/* Compiles the pattern; fails with PCRE2's message and the offset in the pattern. */
int qlt_regex_compile(qlt_regex *p, const char *pattern);
void qlt_regex_free(qlt_regex *p);
/* Per-thread match state for qlt_regex_split (pcre2_match_data_8). */
void *qlt_regex_match_data(const qlt_regex *p);
void qlt_regex_match_data_free(void *match_data);
/* Cuts text (valid UTF-8) into words, calling fn on each. Returns 0, fn's first non-zero return, or -1
 * (with the error recorded) when PCRE2 fails. */
int qlt_regex_split(const qlt_regex *p, void *match_data, const char *text, size_t len, qlt_word_fn fn,
                     void *ctx);

#endif
