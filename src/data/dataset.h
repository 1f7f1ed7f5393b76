/* dataset.h: training / evaluation data as fixed-shape rows of seq_len tokens.
 *
 * Input files (.jsonl or .jsonl.gz, one example a line) in one of the formats of data.format
 * (text | completion | alpaca | chat | tokens) are tokenized, masked (labels -100 where no loss is
 * taken), then packed (data.packing: examples concatenated into rows of exactly seq_len tokens) or
 * padded (one example a row, labels -100 on the padding). Labels are unshifted, Hugging Face style:
 * the model's logits at t predict labels[t+1] of the same row; with packing the first token of every
 * example has label -100, so no token is trained to predict across an example boundary.
 *
 * seg_start[t] is the index inside the row of the first token of t's example, positions[t] =
 * t - seg_start[t] (positions restart at every example; attention never crosses an example). */
#ifndef QLT_DATASET_H
#define QLT_DATASET_H

#include <stdint.h>

#include "config/config.h"
#include "tokenizer/tokenizer.h"

typedef struct qlt_dataset {
    int64_t n_rows;
    int seq_len;
    int32_t *input_ids; /* [n_rows, seq_len] */
    int32_t *labels;    /* [n_rows, seq_len], -100 = no loss */
    int32_t *seg_start; /* [n_rows, seq_len] */
    /* statistics, reported by the trainer */
    int64_t n_examples;  /* examples read */
    int64_t n_truncated; /* examples longer than seq_len, cut */
    int64_t n_skipped;   /* bad lines skipped (data.skip_bad) */
    int64_t n_tokens;    /* real (non-pad) tokens */
    int64_t n_label_tokens; /* labels != -100 */
    int32_t pad_id;      /* the id padding uses (labels -100 there; its own segment at a row's end) */
} qlt_dataset;

/* Builds a dataset from `files` according to cfg->data (format, seq_len, packing, tokenizer, ...).
 * model_dir is where the tokenizer is found when data.tokenizer is empty. cache_dir, when not NULL,
 * holds the tokenized+packed cache (data.cache). Errors name file and line. */
int qlt_dataset_build(qlt_dataset *ds, const qlt_config *cfg, const qlt_path_list *files,
                      const char *model_dir, const char *cache_dir);
/* The same, with the model's own tokenizer model_tok (a GGUF file's; kept by the caller) used instead of
 * <model_dir>/tokenizer.json when data.tokenizer is empty (NULL: as qlt_dataset_build). */
int qlt_dataset_build_with(qlt_dataset *ds, const qlt_config *cfg, const qlt_path_list *files,
                           const char *model_dir, const qlt_tokenizer *model_tok, const char *cache_dir);
/* Splits off the last `fraction` of rows (at least one row when fraction > 0) into *eval. */
int qlt_dataset_split(qlt_dataset *train, qlt_dataset *eval, float fraction, uint64_t seed);
/* The most examples whose attention masking matters in one row: the examples of a row, less a trailing run
 * of examples no loss is taken from (the padding of data.packing: false). Masking those away changes
 * nothing that reaches the loss or a gradient: attention is causal, so only tokens at or after an example's
 * start see the change, and none of them has a label after it. 0 for an empty dataset. */
int qlt_dataset_max_row_examples(const qlt_dataset *ds);
void qlt_dataset_free(qlt_dataset *ds);

#endif
