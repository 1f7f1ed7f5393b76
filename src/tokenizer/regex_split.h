/* regex_split.h: the regex of a `Split` pre-tokenizer (and of ByteLevel's use_regex) in a Hugging Face
 * tokenizer.json: compiled with PCRE2 in UTF + Unicode-property mode, JIT when available, it cuts text
 * into the matches and the text between them, and `behavior` makes words of those as tokenizers does:
 *   Isolated            every match and every gap a word (Qwen, Llama-3, GPT-2);
 *   Removed             the gaps only;
 *   MergedWithPrevious  a match joins the word before it (unless that one is a match too);
 *   MergedWithNext      a match joins the word after it (unless that one is a match too);
 *   Contiguous          neighbours of the same kind (match or gap) joined.
 * `invert` swaps what counts as a match. Empty matches are skipped. pre_tokenizer.h chains this with
 * the other pre-tokenizers. */
#ifndef QLT_REGEX_SPLIT_H
#define QLT_REGEX_SPLIT_H

#include <stddef.h>

/* The GPT-2 pattern, used by a ByteLevel pre-tokenizer with use_regex: true. */
#define QLT_GPT2_PATTERN                                                                            \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef enum qlt_split_behavior {
    QLT_SPLIT_ISOLATED = 1,
    QLT_SPLIT_REMOVED,
    QLT_SPLIT_MERGED_WITH_PREVIOUS,
    QLT_SPLIT_MERGED_WITH_NEXT,
    QLT_SPLIT_CONTIGUOUS,
} qlt_split_behavior;

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
/* The behavior named in tokenizer.json ("Isolated", ...); 0 when it is none of the five. */
qlt_split_behavior qlt_split_behavior_parse(const char *name);
/* Cuts text (valid UTF-8) into words by the behavior, calling fn on each. Returns 0, fn's first non-zero
 * return, or -1 (with the error recorded) when PCRE2 fails. */
int qlt_regex_split(const qlt_regex *p, void *match_data, const char *text, size_t len, qlt_split_behavior behavior,
                    int invert, qlt_word_fn fn, void *ctx);

#endif
