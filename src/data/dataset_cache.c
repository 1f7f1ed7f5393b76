/* dataset_cache.c: the tokenized, packed dataset on disk, so a resume or a sweep skips tokenizing.
 *
 * File: header (magic "QLTDSET\0", version, seq_len, the counts, the key, a checksum of the arrays),
 * then input_ids, labels, seg_start as int32 [n_rows, seq_len] each, native byte order. The key hashes
 * the input files' bytes, tokenizer.json's bytes (and tokenizer_config.json's beside it, which names eos and
 * pad) and every data.* setting that changes the rows; a file
 * whose key, size or checksum does not match is rebuilt, never trusted. Written to a temporary name and
 * renamed, so a crash never leaves a half-written cache under the real name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "common/hash.h"
#include "data/dataset_internal.h"

enum { CACHE_VERSION = 1 };

typedef struct cache_header {
    char magic[8];
    uint32_t version;
    int32_t seq_len;
    int32_t pad_id;
    int32_t reserved;
    int64_t n_rows, n_examples, n_truncated, n_skipped, n_tokens, n_label_tokens;
    uint64_t key;
    uint64_t checksum;
} cache_header;

static int hash_file(const char *path, uint64_t *h) {
    QLT_TRY(qlt_check_not_dir(path));
    FILE *f = fopen(path, "rb");
    if (!f) return qlt_fail("%s: cannot open (a data file)", path);
    enum { CHUNK = 1 << 20 };
    char *buf = qlt_xmalloc(CHUNK);
    size_t got;
    while ((got = fread(buf, 1, CHUNK, f)) > 0) *h = qlt_hash64(buf, got, *h);
    int bad = ferror(f);
    fclose(f);
    free(buf);
    return bad ? qlt_fail("%s: read error", path) : 0;
}

static uint64_t hash_str(const char *s, uint64_t h) { return qlt_hash64(s ? s : "", s ? strlen(s) + 1 : 1, h); }

int qlt_dataset_cache_key(const qlt_config *cfg, const qlt_path_list *files, const char *tokenizer_path,
                          const qlt_tokenizer *tok, uint64_t *key) {
    uint64_t h = 0x716c742d64617461ULL + CACHE_VERSION;
    for (int i = 0; i < files->count; i++) {
        h = hash_str(files->items[i], h);
        QLT_TRY(hash_file(files->items[i], &h));
    }
    if (tokenizer_path) {
        QLT_TRY(hash_file(tokenizer_path, &h));
        /* tokenizer_config.json beside it names eos / pad (qlt_tokenizer_load), which shape the rows too */
        size_t n = strlen(tokenizer_path);
        char *cfg_path = qlt_xmalloc(n + 32);
        memcpy(cfg_path, tokenizer_path, n + 1);
        char *slash = strrchr(cfg_path, '/');
        strcpy(slash ? slash + 1 : cfg_path, "tokenizer_config.json");
        FILE *probe = fopen(cfg_path, "rb");
        int rc = 0;
        h = hash_str(probe ? "config" : "none", h);
        if (probe) {
            fclose(probe);
            rc = hash_file(cfg_path, &h);
        }
        free(cfg_path);
        QLT_TRY(rc);
    }
    if (tok) {
        uint64_t th = qlt_tokenizer_hash(tok);
        h = qlt_hash64(&th, sizeof th, hash_str("in-memory tokenizer", h));
    }
    /* the keys' text, so a cache keyed before these keys were enums stays valid */
    h = hash_str(qlt_config_enum_text("data.format", cfg->data.format), h);
    h = hash_str(qlt_config_enum_text("data.chat_template", cfg->data.chat_template), h);
    int64_t settings[] = {cfg->data.seq_len, cfg->data.packing, cfg->data.train_on_prompt, cfg->data.skip_bad};
    *key = qlt_hash64(settings, sizeof settings, h);
    return 0;
}

static uint64_t arrays_checksum(const qlt_dataset *ds) {
    size_t bytes = (size_t)ds->n_rows * (size_t)ds->seq_len * sizeof(int32_t);
    uint64_t h = qlt_hash64(ds->input_ids, bytes, 1);
    h = qlt_hash64(ds->labels, bytes, h);
    return qlt_hash64(ds->seg_start, bytes, h);
}

int qlt_dataset_cache_load(qlt_dataset *ds, const char *path, uint64_t key) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    cache_header h;
    qlt_dataset d;
    memset(&d, 0, sizeof d);
    const char *why = NULL;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, "QLTDSET", 8) != 0) why = "bad header";
    else if (h.version != CACHE_VERSION || h.key != key) why = "stale"; /* another build's cache: quietly rebuilt */
    else if (h.seq_len < 1 || h.n_rows < 0 || h.n_rows > ((int64_t)1 << 40) / h.seq_len) why = "bad header";
    if (!why) {
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        size_t bytes = (size_t)h.n_rows * (size_t)h.seq_len * sizeof(int32_t);
        if (size < 0 || (size_t)size != sizeof h + 3 * bytes) {
            why = "wrong size";
        } else {
            fseek(f, (long)sizeof h, SEEK_SET);
            d.seq_len = h.seq_len;
            d.n_rows = h.n_rows;
            d.input_ids = qlt_xmalloc(bytes);
            d.labels = qlt_xmalloc(bytes);
            d.seg_start = qlt_xmalloc(bytes);
            if (bytes && (fread(d.input_ids, bytes, 1, f) != 1 || fread(d.labels, bytes, 1, f) != 1 ||
                          fread(d.seg_start, bytes, 1, f) != 1))
                why = "short read";
            else if (arrays_checksum(&d) != h.checksum)
                why = "checksum mismatch";
        }
    }
    fclose(f);
    if (why) {
        if (strcmp(why, "stale") != 0)
            fprintf(stderr, "qlora-train: dataset cache %s is corrupt (%s): rebuilding it\n", path, why);
        qlt_dataset_free(&d);
        return 0;
    }
    d.n_examples = h.n_examples;
    d.pad_id = h.pad_id;
    d.n_truncated = h.n_truncated;
    d.n_skipped = h.n_skipped;
    d.n_tokens = h.n_tokens;
    d.n_label_tokens = h.n_label_tokens;
    *ds = d;
    return 1;
}

int qlt_dataset_cache_save(const qlt_dataset *ds, const char *path, uint64_t key) {
    cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, "QLTDSET", 8);
    h.version = CACHE_VERSION;
    h.seq_len = ds->seq_len;
    h.n_rows = ds->n_rows;
    h.pad_id = ds->pad_id;
    h.n_examples = ds->n_examples;
    h.n_truncated = ds->n_truncated;
    h.n_skipped = ds->n_skipped;
    h.n_tokens = ds->n_tokens;
    h.n_label_tokens = ds->n_label_tokens;
    h.key = key;
    h.checksum = arrays_checksum(ds);
    size_t n = strlen(path);
    char *tmp = qlt_xmalloc(n + 32);
    snprintf(tmp, n + 32, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(tmp);
        return qlt_fail("%s: cannot write the dataset cache (check data.cache and the output directory)", path);
    }
    size_t bytes = (size_t)ds->n_rows * (size_t)ds->seq_len * sizeof(int32_t);
    int ok = fwrite(&h, sizeof h, 1, f) == 1;
    if (bytes)
        ok = ok && fwrite(ds->input_ids, bytes, 1, f) == 1 && fwrite(ds->labels, bytes, 1, f) == 1 &&
             fwrite(ds->seg_start, bytes, 1, f) == 1;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        free(tmp);
        return qlt_fail("%s: writing the dataset cache failed (disk full?)", path);
    }
    free(tmp);
    return 0;
}
