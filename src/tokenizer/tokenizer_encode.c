/* tokenizer_encode.c: qlt_encoder (per-thread encoding state with a word cache) and decoding (see
 * tokenizer.h for the pipeline). The word cache maps a word's bytes to its ids: prose repeats words, so
 * most words skip BPE entirely. It is flushed whole when full: simple, and bounded memory. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hash.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"

enum {
    CACHE_SLOTS = 1 << 16,           /* power of two, load factor <= 1/2 */
    CACHE_MAX_WORD = 128,            /* longer words are not cached */
    CACHE_ARENA = 4 << 20,           /* bytes of keys, ids of values */
};

typedef struct cache_slot {
    uint64_t hash;
    uint32_t key_off, key_len; /* key_len 0 = empty slot */
    uint32_t ids_off, n_ids;
} cache_slot;

struct qlt_encoder {
    const qlt_tokenizer *tok;
    qlt_bpe_scratch scratch;
    qlt_ids *out; /* where the word callback appends */
    cache_slot *slots;
    int64_t n_cached;
    char *keys;
    int64_t keys_len;
    int32_t *ids;
    int64_t ids_len;
    qlt_pre_state *pre;
};

qlt_encoder *qlt_encoder_new(const qlt_tokenizer *tok) {
    qlt_encoder *enc = qlt_xcalloc(1, sizeof *enc);
    enc->tok = tok;
    enc->pre = qlt_pre_state_new(&tok->pre);
    enc->slots = qlt_xcalloc(CACHE_SLOTS, sizeof *enc->slots);
    enc->keys = qlt_xmalloc(CACHE_ARENA);
    enc->ids = qlt_xmalloc(CACHE_ARENA * sizeof *enc->ids);
    return enc;
}

void qlt_encoder_free(qlt_encoder *enc) {
    if (!enc) return;
    qlt_pre_state_free(enc->pre);
    qlt_bpe_scratch_free(&enc->scratch);
    free(enc->slots);
    free(enc->keys);
    free(enc->ids);
    free(enc);
}

static int on_word(void *ctx, const char *word, size_t n) {
    qlt_encoder *enc = ctx;
    const qlt_bpe *bpe = &enc->tok->bpe;
    qlt_ids *out = enc->out;
    if (n > CACHE_MAX_WORD) {
        qlt_bpe_merge_word(bpe, &enc->scratch, (const uint8_t *)word, n, out);
        return 0;
    }
    uint64_t h = qlt_hash64(word, n, 0);
    uint64_t i = h & (CACHE_SLOTS - 1);
    for (cache_slot *s; (s = &enc->slots[i])->key_len; i = (i + 1) & (CACHE_SLOTS - 1)) {
        if (s->hash == h && s->key_len == n && memcmp(enc->keys + s->key_off, word, n) == 0) {
            if (s->n_ids == 0) return 0;
            qlt_ids_reserve(out, s->n_ids);
            memcpy(out->data + out->len, enc->ids + s->ids_off, s->n_ids * sizeof *out->data);
            out->len += s->n_ids;
            return 0;
        }
    }
    int64_t start = out->len;
    qlt_bpe_merge_word(bpe, &enc->scratch, (const uint8_t *)word, n, out);
    int64_t count = out->len - start;
    if ((enc->n_cached + 1) * 2 > CACHE_SLOTS || enc->keys_len + (int64_t)n > CACHE_ARENA ||
        enc->ids_len + count > CACHE_ARENA) {
        memset(enc->slots, 0, CACHE_SLOTS * sizeof *enc->slots);
        enc->n_cached = enc->keys_len = enc->ids_len = 0;
        for (i = h & (CACHE_SLOTS - 1); enc->slots[i].key_len; i = (i + 1) & (CACHE_SLOTS - 1)) {}
    }
    cache_slot *s = &enc->slots[i];
    s->hash = h;
    s->key_off = (uint32_t)enc->keys_len;
    s->key_len = (uint32_t)n;
    s->ids_off = (uint32_t)enc->ids_len;
    s->n_ids = (uint32_t)count;
    memcpy(enc->keys + enc->keys_len, word, n);
    if (count > 0) /* a word of bytes without tokens has none (out->data may still be NULL) */
        memcpy(enc->ids + enc->ids_len, out->data + start, (size_t)count * sizeof *out->data);
    enc->keys_len += (int64_t)n;
    enc->ids_len += count;
    enc->n_cached++;
    return 0;
}

/* Normalized text without added tokens: pre-tokenize and merge. at_start: it begins the input. */
static int encode_words(qlt_encoder *enc, const char *text, size_t len, int at_start) {
    return qlt_pre_tokenize(&enc->tok->pre, enc->pre, text, len, at_start, on_word, enc);
}

static int encode_segment(qlt_encoder *enc, const char *text, size_t len, int normalized_pass, int at_start);

/* Cuts the added tokens of one pass out of text (leftmost, then longest), encoding the gaps. Pass 0
 * runs on the raw text with the tokens that are not normalized (all of them when there is no
 * normalizer); pass 1 on normalized text with the rest. at_start: text begins the input. */
static int split_added(qlt_encoder *enc, const char *text, size_t len, int normalized_pass, int at_start) {
    const qlt_tokenizer *tok = enc->tok;
    size_t seg = 0, i = 0;
    while (i < len) {
        unsigned b = (unsigned char)text[i];
        const qlt_added_token *hit = NULL;
        for (int32_t k = tok->added_first[b]; k < tok->added_first[b + 1]; k++) {
            const qlt_added_token *t = &tok->added[k];
            int in_pass = (t->normalized && tok->norm.n_steps > 0) == normalized_pass;
            if (in_pass && (size_t)t->len <= len - i && memcmp(text + i, t->content, (size_t)t->len) == 0) {
                hit = t;
                break;
            }
        }
        if (!hit) {
            i++;
            continue;
        }
        if (i > seg) QLT_TRY(encode_segment(enc, text + seg, i - seg, normalized_pass, at_start && seg == 0));
        qlt_ids_push(enc->out, hit->id);
        i += (size_t)hit->len;
        seg = i;
    }
    if (len > seg) QLT_TRY(encode_segment(enc, text + seg, len - seg, normalized_pass, at_start && seg == 0));
    return 0;
}

static int encode_segment(qlt_encoder *enc, const char *text, size_t len, int normalized_pass, int at_start) {
    if (normalized_pass) return encode_words(enc, text, len, at_start);
    char *norm;
    size_t norm_len;
    int owned;
    QLT_TRY(qlt_normalize(&enc->tok->norm, text, len, &norm, &norm_len, &owned));
    int r = enc->tok->has_normalized_added ? split_added(enc, norm, norm_len, 1, at_start)
                                           : encode_words(enc, norm, norm_len, at_start);
    if (owned) free(norm);
    return r;
}

int qlt_encoder_encode(qlt_encoder *enc, const char *text, size_t len, qlt_ids *out) {
    size_t bad;
    if (!qlt_utf8_valid(text, len, &bad)) return qlt_fail("text is not valid UTF-8 (byte %zu)", bad);
    int64_t start = out->len;
    enc->out = out;
    int r = split_added(enc, text, len, 0, 1);
    enc->out = NULL;
    if (r != 0) out->len = start;
    return r;
}

int qlt_tokenizer_encode(const qlt_tokenizer *tok, const char *text, size_t len, qlt_ids *out) {
    qlt_encoder *enc = qlt_encoder_new(tok);
    int r = qlt_encoder_encode(enc, text, len, out);
    qlt_encoder_free(enc);
    return r;
}

int qlt_tokenizer_decode(const qlt_tokenizer *tok, const int32_t *ids, int64_t n, char **text, size_t *len) {
    const qlt_bpe *bpe = &tok->bpe;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= bpe->n_ids || bpe->tok_off[ids[i]] < 0)
            return qlt_fail("token id %d (position %lld) is not in the tokenizer (ids are 0..%d)", ids[i], (long long)i,
                            bpe->n_ids - 1);
    const char **strings = qlt_xmalloc(((size_t)n + 1) * sizeof *strings);
    int32_t *lens = qlt_xmalloc(((size_t)n + 1) * sizeof *lens);
    for (int64_t i = 0; i < n; i++) {
        strings[i] = bpe->blob + bpe->text_off[ids[i]];
        lens[i] = bpe->text_len[ids[i]];
    }
    *text = qlt_decoder_run(&tok->dec, strings, lens, n, len);
    free(strings);
    free(lens);
    return 0;
}
