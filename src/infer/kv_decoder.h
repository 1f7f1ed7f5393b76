/* kv_decoder.h: the model run for generation: no tape, no gradients, a KV cache per layer, so each new token
 * costs one pass over the weights and attention over the cached keys. The same backend ops as training
 * (embed, rmsnorm, linear, LoRA, rope, add_rmsnorm, swiglu, logits) plus attention_decode, in the order of
 * src/model/forward.c, so a token's logits equal the training forward's on the same sequence (to rounding).
 *
 * A step takes n new tokens (a prompt, in chunks of at most max_chunk, or one generated token), appends their
 * keys and values to the cache and returns the logits of the last one (or of every one, for checks). The ops
 * read the tokens' positions from backend memory, so on a backend with graphs the one-token step is captured
 * once and replayed for every generated token (no launch gaps between its few hundred small kernels). */
#ifndef QLT_KV_DECODER_H
#define QLT_KV_DECODER_H

#include <stdint.h>

#include "model/lora.h"
#include "model/model.h"

typedef struct qlt_kv_decoder {
    const qlt_model *m;
    const qlt_lora *lora; /* NULL: the base model */
    qlt_backend *be;
    int64_t max_len;      /* cache capacity in tokens */
    int64_t max_chunk;    /* most tokens a backend call takes at once */
    int64_t past;         /* tokens in the cache */
    void **k_cache, **v_cache; /* [n_layers] act [max_len, n_kv_heads * head_dim] */
    /* work buffers, act unless float: */
    void *x, *x2, *xn;    /* [max_chunk, hidden] */
    void *q, *qn, *attn;  /* [max_chunk, n_heads * head_dim] */
    void *k_new, *k_rot, *v_new; /* [max_chunk, n_kv_heads * head_dim]: the new rows before kv_store (k_rot: after
                                  * the head norm) */
    void *o, *down;       /* [max_chunk, hidden] */
    void *gu, *act;       /* [max_chunk, 2 * intermediate], [max_chunk, intermediate] */
    float *rstd;          /* [max_chunk * n_heads] */
    float *u;             /* [max_chunk, 3 r]: the adapters' x A^T (lora) */
    float *logits;        /* [vocab] */
    int32_t *ids, *pos;   /* [max_chunk] */
    int use_graph;        /* the backend captures graphs (and QLT_DECODE_GRAPH is not 0) */
    void *step_graph;     /* the captured one-token step (NULL: none yet) */
} qlt_kv_decoder;

/* Allocates the cache for max_len tokens and the work buffers on the model's backend. lora may be NULL.
 * 0, or -1 with qlt_fail (out of memory: names the bytes and suggests a shorter length). */
int qlt_kv_decoder_init(qlt_kv_decoder *d, const qlt_model *m, const qlt_lora *lora, int64_t max_len, int64_t max_chunk);
/* Appends ids [n] (n >= 1, past + n <= max_len) and writes the logits of the last one to logits_last [vocab]
 * (host memory; NULL: not needed), or, when logits_all is not NULL, of every one to logits_all [n, vocab]. */
int qlt_kv_decoder_step(qlt_kv_decoder *d, const int32_t *ids, int64_t n, float *logits_last, float *logits_all);
/* Forgets the cache (a new sequence). */
void qlt_kv_decoder_reset(qlt_kv_decoder *d);
void qlt_kv_decoder_free(qlt_kv_decoder *d);

#endif
