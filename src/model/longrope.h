/* longrope.h: Phi-3's rotary embedding settings, apart from model_config.c's common parsing: LongRoPE ("su")
 * scaling with its short / long factors and attention factor, and partial rotary (partial_rotary_factor), read
 * from config.json in both spellings (transformers 4: rope_scaling + top-level keys; transformers 5:
 * rope_parameters), with the inverse frequencies transformers computes for them. */
#ifndef QLT_LONGROPE_H
#define QLT_LONGROPE_H

#include <stddef.h>

#include "model/model_config.h"

struct cJSON;

/* Reads LongRoPE from the rope settings object s (rope_scaling or rope_parameters; its type already known to
 * be longrope / su / yarn) and root (original_max_position_embeddings, max_position_embeddings): fills the
 * factors (rotary_dim / 2 each), rope_original_max_pos and rope_attn_factor. Call after
 * qlt_longrope_parse_partial. 0, or -1 with qlt_fail naming path and the key. */
int qlt_longrope_parse(qlt_model_config *mc, const struct cJSON *s, const struct cJSON *root, const char *path);
/* partial_rotary_factor (rope_parameters or the top level; Phi-3 only): rotary_dim = int(head_dim * factor),
 * which must be even and positive. */
int qlt_longrope_parse_partial(qlt_model_config *mc, const struct cJSON *params, const struct cJSON *root,
                               const char *path);
/* inv_freq [rotary_dim / 2] as transformers' _compute_longrope_parameters forms it in float32:
 * 1 / (factor[i] * theta ** (float(2i) / rotary_dim)); long_factors 0: the short ones. */
void qlt_longrope_inv_freq(const qlt_model_config *mc, int long_factors, float *inv_freq);
/* 1 when a batch whose largest position is max_position uses the long factors (transformers: max position + 1 >
 * original_max_position_embeddings). */
static inline int qlt_longrope_is_long(const qlt_model_config *mc, int max_position) {
    return mc->rope_type == QLT_ROPE_LONGROPE && max_position + 1 > mc->rope_original_max_pos;
}

/* One line on the rotary embedding beyond theta, what `inspect` prints: LongRoPE's switch and attention factor,
 * partial rotary; "" when neither is set. */
void qlt_longrope_describe(const qlt_model_config *mc, char *buf, size_t size);

#endif
