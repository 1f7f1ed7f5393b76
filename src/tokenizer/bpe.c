/* bpe.c: token table, the two hash maps and the per-word merge (see bpe.h). Both maps use open
 * addressing with linear probing at load factor <= 1/2; they are built once at load and then only read,
 * so any number of threads may encode with one qlt_bpe. */
#include "tokenizer/bpe.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/hash.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

struct qlt_bpe_cand {
    uint32_t rank, pos; /* ordered by rank, then by position (leftmost first) */
    int32_t merged;
    uint32_t ver;       /* sym[pos]'s version when pushed; a mismatch means the pair changed */
};

static uint64_t table_mask_for(int64_t n) {
    uint64_t size = 16;
    while (size < (uint64_t)n * 2) size *= 2;
    return size - 1;
}

void qlt_bpe_init(qlt_bpe *bpe, int32_t n_ids, int64_t n_map, int64_t n_merges) {
    memset(bpe, 0, sizeof *bpe);
    bpe->n_ids = n_ids;
    bpe->tok_off = qlt_xmalloc((size_t)n_ids * sizeof *bpe->tok_off);
    bpe->tok_len = qlt_xcalloc((size_t)n_ids, sizeof *bpe->tok_len);
    bpe->text_off = qlt_xcalloc((size_t)n_ids, sizeof *bpe->text_off);
    bpe->text_len = qlt_xcalloc((size_t)n_ids, sizeof *bpe->text_len);
    for (int32_t i = 0; i < n_ids; i++) bpe->tok_off[i] = -1;
    bpe->unk_id = -1;
    bpe->map_mask = table_mask_for(n_map);
    bpe->map_ids = qlt_xmalloc((bpe->map_mask + 1) * sizeof *bpe->map_ids);
    memset(bpe->map_ids, 0xff, (bpe->map_mask + 1) * sizeof *bpe->map_ids);
    bpe->merge_mask = table_mask_for(n_merges);
    bpe->merge_keys = qlt_xmalloc((bpe->merge_mask + 1) * sizeof *bpe->merge_keys);
    bpe->merge_vals = qlt_xmalloc((bpe->merge_mask + 1) * sizeof *bpe->merge_vals);
    memset(bpe->merge_keys, 0xff, (bpe->merge_mask + 1) * sizeof *bpe->merge_keys);
    for (int b = 0; b < 256; b++) bpe->byte_id[b] = bpe->fallback_id[b] = -1;
}

void qlt_bpe_free(qlt_bpe *bpe) {
    free(bpe->blob);
    free(bpe->tok_off);
    free(bpe->tok_len);
    free(bpe->text_off);
    free(bpe->text_len);
    free(bpe->map_ids);
    free(bpe->merge_keys);
    free(bpe->merge_vals);
    memset(bpe, 0, sizeof *bpe);
}

static int token_equals(const qlt_bpe *bpe, int32_t id, const void *bytes, size_t len) {
    return (size_t)bpe->tok_len[id] == len && memcmp(bpe->blob + bpe->tok_off[id], bytes, len) == 0;
}

int32_t qlt_bpe_lookup(const qlt_bpe *bpe, const void *bytes, size_t len) {
    uint64_t i = qlt_hash64(bytes, len, 0) & bpe->map_mask;
    for (;;) {
        int32_t id = bpe->map_ids[i];
        if (id < 0) return -1;
        if (token_equals(bpe, id, bytes, len)) return id;
        i = (i + 1) & bpe->map_mask;
    }
}

/* Appends len bytes to the blob; returns their offset. */
static int64_t blob_put(qlt_bpe *bpe, const void *bytes, size_t len) {
    if (len == 0) return bpe->blob_len; /* an empty token: nothing to copy (and no blob yet, perhaps) */
    if (bpe->blob_len + (int64_t)len > bpe->blob_cap) {
        int64_t cap = bpe->blob_cap ? bpe->blob_cap : 1 << 16;
        while (cap < bpe->blob_len + (int64_t)len) cap *= 2;
        bpe->blob = qlt_xrealloc(bpe->blob, (size_t)cap);
        bpe->blob_cap = cap;
    }
    memcpy(bpe->blob + bpe->blob_len, bytes, len);
    bpe->blob_len += (int64_t)len;
    return bpe->blob_len - (int64_t)len;
}

int qlt_bpe_set_token(qlt_bpe *bpe, int32_t id, const void *bytes, size_t len, const char *text, size_t text_len,
                      int in_map) {
    if (id < 0 || id >= bpe->n_ids) return qlt_fail("token id %d is out of range [0, %d)", id, bpe->n_ids);
    if (bpe->tok_off[id] >= 0) return qlt_fail("token id %d appears twice", id);
    bpe->tok_off[id] = blob_put(bpe, bytes, len);
    bpe->tok_len[id] = (int32_t)len;
    int same = len == text_len && memcmp(bytes, text, len) == 0; /* not byte-level: stored once */
    bpe->text_off[id] = same ? bpe->tok_off[id] : blob_put(bpe, text, text_len);
    bpe->text_len[id] = (int32_t)text_len;
    if (!in_map) return 0;
    QLT_ASSERT((uint64_t)(bpe->map_count + 1) * 2 <= bpe->map_mask + 1);
    uint64_t i = qlt_hash64(bytes, len, 0) & bpe->map_mask;
    while (bpe->map_ids[i] >= 0) {
        if (token_equals(bpe, bpe->map_ids[i], bytes, len)) return 0; /* first id wins, like a dict */
        i = (i + 1) & bpe->map_mask;
    }
    bpe->map_ids[i] = id;
    bpe->map_count++;
    return 0;
}

static int merge_find(const qlt_bpe *bpe, int32_t a, int32_t b, uint64_t *val) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t i = qlt_hash_mix64(key) & bpe->merge_mask;
    for (;;) {
        uint64_t k = bpe->merge_keys[i];
        if (k == UINT64_MAX) return 0;
        if (k == key) {
            *val = bpe->merge_vals[i];
            return 1;
        }
        i = (i + 1) & bpe->merge_mask;
    }
}

void qlt_bpe_add_merge(qlt_bpe *bpe, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t i = qlt_hash_mix64(key) & bpe->merge_mask;
    while (bpe->merge_keys[i] != UINT64_MAX) {
        if (bpe->merge_keys[i] == key) return;
        i = (i + 1) & bpe->merge_mask;
    }
    bpe->merge_keys[i] = key;
    bpe->merge_vals[i] = ((uint64_t)(uint32_t)rank << 32) | (uint32_t)merged;
}

void qlt_bpe_finish(qlt_bpe *bpe) {
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        bpe->byte_id[b] = bpe->byte_level ? qlt_bpe_lookup(bpe, &byte, 1) : -1;
        bpe->fallback_id[b] = qlt_bpe_lookup(bpe, name, 6);
    }
}

/* ---- the merge of one word ---- */

static int cand_less(const struct qlt_bpe_cand *x, const struct qlt_bpe_cand *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(qlt_bpe_scratch *s, int64_t *n, struct qlt_bpe_cand c) {
    if (*n == s->heap_cap) {
        s->heap_cap = s->heap_cap ? s->heap_cap * 2 : 64;
        s->heap = qlt_xrealloc(s->heap, (size_t)s->heap_cap * sizeof *s->heap);
    }
    int64_t i = (*n)++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = c;
}

static struct qlt_bpe_cand heap_pop(qlt_bpe_scratch *s, int64_t *n) {
    struct qlt_bpe_cand top = s->heap[0], last = s->heap[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && cand_less(&s->heap[child + 1], &s->heap[child])) child++;
        if (!cand_less(&s->heap[child], &last)) break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    if (*n > 0) s->heap[i] = last;
    return top;
}

static void push_pair(const qlt_bpe *bpe, qlt_bpe_scratch *s, int64_t *n, int32_t pos) {
    int32_t nx = s->next[pos];
    uint64_t val;
    if (nx < 0 || !merge_find(bpe, s->sym[pos], s->sym[nx], &val)) return;
    struct qlt_bpe_cand c = {(uint32_t)(val >> 32), (uint32_t)pos, (int32_t)(uint32_t)val, s->ver[pos]};
    heap_push(s, n, c);
}

/* Grows the scratch to hold n symbols. */
static void scratch_reserve(qlt_bpe_scratch *s, int64_t n) {
    if (n <= s->cap) return;
    s->cap = n * 2;
    s->sym = qlt_xrealloc(s->sym, (size_t)s->cap * sizeof *s->sym);
    s->next = qlt_xrealloc(s->next, (size_t)s->cap * sizeof *s->next);
    s->prev = qlt_xrealloc(s->prev, (size_t)s->cap * sizeof *s->prev);
    s->ver = qlt_xrealloc(s->ver, (size_t)s->cap * sizeof *s->ver);
}

/* The first symbols of a word: one token per byte (byte-level) or character, a character without a
 * token handled as tokenizers' BPE::merge_word does: its <0xNN> tokens (byte_fallback, when every one
 * exists), else the unknown token, else nothing. A pending unknown token is written when the next known
 * character comes (so byte-fallback tokens between go first, as there) or at the end. Returns the count. */
static int32_t initial_symbols(const qlt_bpe *bpe, qlt_bpe_scratch *s, const uint8_t *word, size_t len) {
    scratch_reserve(s, (int64_t)len * 2 + 1); /* a byte-level byte falls back to at most 2 bytes */
    int32_t n = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < len;) {
        size_t clen = bpe->byte_level ? 1 : qlt_utf8_char_len(word[i]);
        if (clen > len - i) clen = len - i;
        int32_t id = bpe->byte_level ? bpe->byte_id[word[i]] : qlt_bpe_lookup(bpe, word + i, clen);
        if (id >= 0) {
            if (unk_pending) s->sym[n++] = bpe->unk_id;
            unk_pending = 0;
            s->sym[n++] = id;
            i += clen;
            continue;
        }
        if (bpe->byte_fallback) {
            char spelled[4]; /* the character as the vocabulary spells it: its UTF-8 bytes fall back */
            size_t m = bpe->byte_level ? qlt_byte_level_encode(word + i, 1, spelled) : clen;
            const uint8_t *fb = bpe->byte_level ? (const uint8_t *)spelled : word + i;
            size_t k = 0;
            while (k < m && bpe->fallback_id[fb[k]] >= 0) k++;
            if (k == m) {
                for (k = 0; k < m; k++) s->sym[n++] = bpe->fallback_id[fb[k]];
                i += clen;
                continue;
            }
        }
        if (bpe->unk_id >= 0) {
            if (unk_pending && !bpe->fuse_unk) s->sym[n++] = bpe->unk_id;
            unk_pending = 1;
        }
        i += clen;
    }
    if (unk_pending) s->sym[n++] = bpe->unk_id;
    return n;
}

void qlt_bpe_merge_word(const qlt_bpe *bpe, qlt_bpe_scratch *s, const uint8_t *word, size_t len, qlt_ids *out) {
    if (len == 1 && bpe->byte_level && bpe->byte_id[word[0]] >= 0) {
        qlt_ids_push(out, bpe->byte_id[word[0]]);
        return;
    }
    if (bpe->ignore_merges) {
        int32_t whole = qlt_bpe_lookup(bpe, word, len);
        if (whole >= 0) {
            qlt_ids_push(out, whole);
            return;
        }
    }
    int32_t n = initial_symbols(bpe, s, word, len);
    if (n == 0) return;
    for (int32_t i = 0; i < n; i++) {
        s->prev[i] = i - 1;
        s->next[i] = i + 1 < n ? i + 1 : -1;
        s->ver[i] = 0;
    }
    int64_t heap_n = 0;
    for (int32_t i = 0; i + 1 < n; i++) push_pair(bpe, s, &heap_n, i);
    while (heap_n > 0) {
        struct qlt_bpe_cand c = heap_pop(s, &heap_n);
        int32_t i = (int32_t)c.pos;
        if (s->sym[i] < 0 || c.ver != s->ver[i]) continue; /* stale: the pair has changed since */
        int32_t j = s->next[i];
        s->sym[i] = c.merged;
        s->ver[i]++;
        s->next[i] = s->next[j];
        if (s->next[j] >= 0) s->prev[s->next[j]] = i;
        s->sym[j] = -1;
        int32_t p = s->prev[i];
        if (p >= 0) {
            s->ver[p]++;
            push_pair(bpe, s, &heap_n, p);
        }
        push_pair(bpe, s, &heap_n, i);
    }
    qlt_ids_reserve(out, n);
    for (int32_t i = 0; i >= 0; i = s->next[i]) out->data[out->len++] = s->sym[i];
}

void qlt_bpe_scratch_free(qlt_bpe_scratch *s) {
    free(s->sym);
    free(s->next);
    free(s->prev);
    free(s->ver);
    free(s->heap);
    memset(s, 0, sizeof *s);
}
