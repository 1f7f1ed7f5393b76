/* merge.h: folds a trained LoRA adapter into its base model's weights, so the result loads anywhere without
 * PEFT: for every projection with an adapter W' = W + scale * B A (A [r, in], B [out, r], scale = alpha / r,
 * or alpha / sqrt(r) with rsLoRA), the sum formed in double and rounded once to the output dtype.
 *
 * W is either the weight as stored in the model directory (QLT_MERGE_ONTO_ORIGINAL) or its NF4 round trip
 * (QLT_MERGE_ONTO_DEQUANTIZED): the values the adapter was trained against when the base was NF4
 * (model.quant: nf4, quantized on load exactly as qlt_model_load does, or a bitsandbytes 4-bit checkpoint's
 * own codes). With ONTO_DEQUANTIZED every projection is dequantized, with an adapter or not, so the merged
 * model computes what the trained one did.
 *
 * Works tensor by tensor from the mmapped source (host memory: about one tensor), so any size merges. The
 * output tensors keep Hugging Face names and shapes; a bitsandbytes checkpoint's quant-state tensors become
 * one dense weight each, and with tie_word_embeddings no lm_head.weight is listed. */
#ifndef QLT_MERGE_H
#define QLT_MERGE_H

#include <stdint.h>

#include "formats/safetensors.h"
#include "model/model.h"
#include "model/model_config.h"

typedef enum qlt_merge_onto {
    QLT_MERGE_ONTO_ORIGINAL = 0, /* the source's unquantized weights */
    QLT_MERGE_ONTO_DEQUANTIZED,  /* their NF4 round trip (or a bitsandbytes checkpoint's NF4, dequantized) */
} qlt_merge_onto;

typedef struct qlt_merge_opts {
    qlt_merge_onto onto;
    int nf4_blocksize; /* ONTO_DEQUANTIZED: the blocksize unquantized projections are quantized with
                          (model.nf4_blocksize); 0 leaves a projection a bitsandbytes checkpoint did not
                          quantize as stored (model.quant: none) */
    int double_quant;  /* model.double_quant (1) */
} qlt_merge_opts;

/* One output tensor. */
typedef struct qlt_merge_tensor {
    char *name;                 /* Hugging Face name */
    int ndim;
    int64_t shape[QLT_MAX_DIMS];
    qlt_dtype src_dtype;        /* the stored dtype (U8 codes for a bitsandbytes module: dense after the merge) */
    const qlt_st_tensor *src;   /* the stored tensor (a bitsandbytes module: its packed codes) */
    int layer;                  /* a projection: its layer and slot; -1 otherwise */
    qlt_proj proj;
    int bnb;                    /* a bitsandbytes module: dequantized from its quant state */
    int adapter;                /* carries an adapter */
} qlt_merge_tensor;

typedef struct qlt_merge {
    qlt_model_config cfg;
    char *model_dir, *adapter_dir;
    qlt_st_dir src;
    qlt_st_file adapter;         /* adapter_model.safetensors, mmapped */
    int bnb;                     /* the source is a bitsandbytes 4-bit checkpoint */
    qlt_merge_opts opts;
    int r, rslora;
    float alpha;
    double scale;                /* alpha / r or alpha / sqrt(r), in double */
    unsigned targets;            /* QLT_TARGET_* bits of the adapter */
    int n_tensors;
    qlt_merge_tensor *tensors;   /* [n_tensors], in the source's order */
    int n_merged;                /* projections that carry an adapter */
} qlt_merge;

/* Opens model_dir (config.json + safetensors, or a bitsandbytes 4-bit checkpoint) and the PEFT adapter in
 * adapter_dir, checks that every adapter tensor fits the model (one-line errors naming the file and the
 * tensor) and lists the output tensors. ONTO_ORIGINAL of a bitsandbytes checkpoint is an error (it holds no
 * unquantized weights). 0, or -1 with qlt_fail (nothing left open). */
int qlt_merge_open(qlt_merge *m, const char *model_dir, const char *adapter_dir, const qlt_merge_opts *opts);
/* The dtype tensor i is written in when the output asks for `dtype`: dtype for float tensors, the stored one
 * for others (copied as they are). */
qlt_dtype qlt_merge_out_dtype(const qlt_merge *m, int i, qlt_dtype dtype);
/* Element count of tensor i. */
int64_t qlt_merge_numel(const qlt_merge *m, int i);
/* Writes tensor i's values into out [numel] in qlt_merge_out_dtype(m, i, dtype) (dtype F32, F16 or BF16):
 * a projection merged (or dequantized) and rounded once, any other float tensor converted. 0, or -1 with
 * qlt_fail naming the tensor. */
int qlt_merge_read(const qlt_merge *m, int i, qlt_dtype dtype, void *out);
/* The index of the tensor named name, or -1. */
int qlt_merge_find(const qlt_merge *m, const char *name);
void qlt_merge_close(qlt_merge *m);

/* The merge of one weight, exposed for tests: out [rows, cols] = w + scale * b [rows, r] . a [r, cols], each
 * element summed in double and rounded once to dtype (F32, F16 or BF16). Rows run in parallel; the result
 * does not depend on the thread count. */
void qlt_merge_weight(void *out, qlt_dtype dtype, const float *w, const float *a, const float *b, int64_t rows,
                      int64_t cols, int r, double scale);

#endif
