/* gemma_model.h: what Gemma 2 / 3 add to the model layer beyond config.json (gemma_config.h): loading (the
 * (1 + w) norms folded, the sliding layers' RoPE), the backend check, and the decoder layer on the tape
 * (forward_gemma.c). */
#ifndef QLT_GEMMA_MODEL_H
#define QLT_GEMMA_MODEL_H

#include <stdint.h>

#include "autograd/graph.h"
#include "model/forward.h"
#include "model/model.h"

/* Gemma's RMSNorm multiplies by (1 + w); the stored weights are shifted at load so the ordinary RMSNorm ops
 * run it: w [n] += 1 (float32, as transformers forms 1.0 + weight.float()) when mc is a Gemma and `name` is a
 * norm's weight (…norm.weight: the layer norms, q/k norms, the final norm). Others untouched. */
void qlt_gemma_fold_norm(const qlt_model_config *mc, const char *name, float *w, int64_t n);
/* A Gemma model needs the backend's Gemma ops (backend.h: geglu_fwd ... softcap_f32); where one is NULL (the
 * CUDA backend today) a one-line error naming `where` says to use train.device: cpu. 0 for other families. */
int qlt_gemma_backend_check(const qlt_model_config *mc, const qlt_backend *be, const char *where);
/* The end of loading: uploads the sliding layers' RoPE frequencies (m->inv_freq_local). 0 for others. */
int qlt_gemma_finish(qlt_model *m);
/* sqrt(hidden) as transformers multiplies the embeddings by it: rounded to float32, then to the activation
 * dtype (bf16 on CUDA: 55.4256 -> 55.5 for 3072). */
float qlt_gemma_embed_scale(const qlt_model_config *mc, qlt_dtype act_dtype);
/* Gemma's decoder layer on the tape: h [n, hidden] -> h + post_norm(attn(norm(h))) -> + post_norm(mlp(norm(.))).
 * lora[p]: each projection's adapter or NULL. Returns the output value. */
int qlt_gemma_layer_forward(qlt_graph *g, const qlt_model *m, const qlt_batch_dev *b, int l, int h,
                            const qlt_lora_ref *const *lora);
/* Logits for evaluation: be->logits, then the final soft-cap when the model has one. out float [n, vocab]. */
void qlt_model_logits(const qlt_model *m, float *out, const void *x, int64_t n);

#endif
