/* dataset_internal.h: the pieces of qlt_dataset_build, one file each: dataset_format.c (one JSONL line
 * -> one example's ids and labels), dataset_pack.c (examples -> fixed rows), dataset_cache.c (the
 * tokenized, packed dataset on disk). dataset.c ties them together. */
#ifndef QLT_DATASET_INTERNAL_H
#define QLT_DATASET_INTERNAL_H

#include <stdint.h>

#include "config/config.h"
#include "data/chat_template.h"
#include "data/dataset.h"
#include "tokenizer/tokenizer.h"

/* What turning a line into an example needs (one per thread: enc is per-thread). */
typedef struct qlt_example_ctx {
    qlt_data_format format;   /* data.format */
    const qlt_tokenizer *tok; /* NULL for the tokens format */
    qlt_encoder *enc;
    qlt_chat_template chat;   /* data.format chat: the resolved template (chatml or llama3) */
    int train_all;            /* data.train_on_prompt */
    int32_t eos;
} qlt_example_ctx;

/* Appends one example's ids and labels. On a bad line fails with what is wrong (the caller adds
 * file:line), appending nothing. */
int qlt_example_parse(const qlt_example_ctx *c, const char *line, size_t len, qlt_ids *ids, qlt_ids *labels);

/* Streams examples into rows of ds (see dataset.h for the layout). */
typedef struct qlt_packer {
    qlt_dataset *ds;
    int packing;
    int32_t pad_id;
    int fill;          /* tokens in the open row (packing) */
    int64_t cap_rows;  /* rows allocated */
} qlt_packer;

void qlt_packer_init(qlt_packer *p, qlt_dataset *ds, int seq_len, int packing, int32_t pad_id);
void qlt_packer_add(qlt_packer *p, const int32_t *ids, const int32_t *labels, int64_t n);
/* Pads the open row (packing) and shrinks the arrays to n_rows. */
void qlt_packer_finish(qlt_packer *p);

/* Cache key over everything that shapes the rows: inputs' bytes, tokenizer.json's bytes (when used) with
 * the tokenizer_config.json beside it, or the hash of a tokenizer given in memory (tok, when not NULL), and
 * the data.* settings. */
int qlt_dataset_cache_key(const qlt_config *cfg, const qlt_path_list *files, const char *tokenizer_path,
                          const qlt_tokenizer *tok, uint64_t *key);
/* 1 = loaded; 0 = absent, stale or corrupt (ds untouched; a corrupt file is reported on stderr). */
int qlt_dataset_cache_load(qlt_dataset *ds, const char *path, uint64_t key);
/* Writes path atomically (temp file + rename). */
int qlt_dataset_cache_save(const qlt_dataset *ds, const char *path, uint64_t key);

#endif
