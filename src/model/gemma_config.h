/* gemma_config.h: the config.json keys of Gemma 2 / 3 (Gemma2ForCausalLM, Gemma3ForCausalLM), read into
 * qlt_model_config's Gemma fields by model_config.c, in both spellings: as the hub's checkpoints have them
 * (transformers 4: rope_theta, rope_scaling, rope_local_base_freq, sliding_window_pattern) and as transformers 5
 * writes them (rope_parameters, per layer type for Gemma 3, and layer_types). */
#ifndef QLT_GEMMA_CONFIG_H
#define QLT_GEMMA_CONFIG_H

#include <cjson/cJSON.h>

#include "model/model_config.h"

/* Whether arch is a Gemma. */
static inline int qlt_arch_is_gemma(qlt_arch arch) { return arch == QLT_ARCH_GEMMA2 || arch == QLT_ARCH_GEMMA3; }
/* Reads the Gemma keys of root (the RoPE of both layer kinds, soft-caps, query_pre_attn_scalar, which layers
 * slide, hidden_activation) after model_config.c read the common ones; sets mc->gemma. 0 or -1 with qlt_fail
 * naming path and the key. */
int qlt_gemma_config_parse(qlt_model_config *mc, const cJSON *root, const char *path);
/* Lines on Gemma's layer for `inspect` (norms, MLP, soft-caps, window pattern, rope bases), no trailing newline;
 * "" for the others. */
void qlt_gemma_describe(const qlt_model_config *mc, char *buf, size_t size);

#endif
