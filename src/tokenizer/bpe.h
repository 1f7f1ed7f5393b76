/* bpe.h: the BPE model: the token table (id <-> the bytes it encodes, and its string as tokenizer.json
 * spells it, for decoding), a hash map from bytes to id, a hash map from a pair of ids to (merge rank,
 * merged id), and the merge of one pre-tokenized word.
 *
 * Byte-level models (GPT-2 style) keep tokens as raw bytes (the byte-level alphabet undone at load), so
 * encoding never builds byte-level strings: a word starts as one symbol per byte (byte_id[]). Other
 * models (SentencePiece style) start a word with one symbol per UTF-8 character. A byte or character
 * without a token becomes its <0xNN> byte tokens (byte_fallback, when all exist), else the unknown token
 * (consecutive ones fused into one with fuse_unk), else nothing: it is dropped, as `tokenizers` drops it.
 * Merges then apply lowest rank first, leftmost first among equal ranks, over a linked list of symbols
 * with a binary heap of candidate pairs (stale entries are recognized by a per-symbol version and
 * dropped): O(n log n). */
#ifndef QLT_BPE_H
#define QLT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/token_ids.h"

typedef struct qlt_bpe {
    int32_t n_ids;      /* token table size: max id + 1 */
    char *blob;         /* every token's bytes and string, back to back */
    int64_t blob_len, blob_cap;
    int64_t *tok_off;   /* [n_ids] offset of the bytes in blob, -1 = no such id */
    int32_t *tok_len;   /* [n_ids] */
    int64_t *text_off;  /* [n_ids] offset of the string in blob (what the decoder reads) */
    int32_t *text_len;  /* [n_ids] */
    int32_t *map_ids;   /* [map_mask+1] open-addressing bytes -> id, -1 = empty */
    uint64_t map_mask;
    int64_t map_count;
    uint64_t *merge_keys; /* [merge_mask+1] (a << 32 | b), UINT64_MAX = empty */
    uint64_t *merge_vals; /* (rank << 32 | merged id) */
    uint64_t merge_mask;
    int byte_level;       /* a word is bytes, one symbol each; else UTF-8 characters */
    int32_t byte_id[256]; /* the single-byte token of each byte, -1 = none */
    int byte_fallback;    /* a character without a token becomes its <0xNN> tokens */
    int32_t fallback_id[256]; /* the id of "<0xNN>" for each byte, -1 = none */
    int32_t unk_id;       /* the unknown token, -1 = none (unknown characters are dropped) */
    int fuse_unk;         /* consecutive unknown characters become one unknown token */
    int ignore_merges;    /* a word that is itself a token is emitted whole (Llama-3) */
} qlt_bpe;

/* Per-thread working memory of qlt_bpe_merge_word. */
typedef struct qlt_bpe_scratch {
    int64_t cap;
    int32_t *sym, *next, *prev;
    uint32_t *ver;
    struct qlt_bpe_cand *heap;
    int64_t heap_cap;
} qlt_bpe_scratch;

/* Sizes the tables for up to n_ids ids, n_map string-mapped tokens and n_merges merges. */
void qlt_bpe_init(qlt_bpe *bpe, int32_t n_ids, int64_t n_map, int64_t n_merges);
void qlt_bpe_free(qlt_bpe *bpe);
/* Records token `id` as `len` bytes spelled `text` in tokenizer.json; with in_map it is also found by
 * qlt_bpe_lookup (the model's vocabulary; added tokens are matched elsewhere). Fails when id is out of
 * range or already set. */
int qlt_bpe_set_token(qlt_bpe *bpe, int32_t id, const void *bytes, size_t len, const char *text, size_t text_len,
                      int in_map);
/* The id of the vocabulary token with these bytes, or -1. */
int32_t qlt_bpe_lookup(const qlt_bpe *bpe, const void *bytes, size_t len);
/* Adds merge (a, b) -> merged at `rank` (lower merges first); a pair seen twice keeps its first rank. */
void qlt_bpe_add_merge(qlt_bpe *bpe, int32_t a, int32_t b, int32_t rank, int32_t merged);
/* Fills byte_id[] and fallback_id[] once every token is set. */
void qlt_bpe_finish(qlt_bpe *bpe);
/* Appends the tokens of one word (bytes; valid UTF-8 unless byte-level; len >= 1) to out. */
void qlt_bpe_merge_word(const qlt_bpe *bpe, qlt_bpe_scratch *s, const uint8_t *word, size_t len, qlt_ids *out);
void qlt_bpe_scratch_free(qlt_bpe_scratch *s);

#endif
