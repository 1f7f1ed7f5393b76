/* model_config.h: the architecture of a Hugging Face decoder-only model, read from its config.json or
 * from a llama.cpp GGUF file's metadata. Supported: LlamaForCausalLM, Qwen2ForCausalLM (q/k/v bias),
 * Qwen3ForCausalLM (q/k RMSNorm per head), MistralForCausalLM (sliding-window attention), Gemma2ForCausalLM and
 * Gemma3ForCausalLM (model/gemma_config.c), Phi3ForCausalLM (GGUF: general.architecture llama, mistral,
 * qwen2, qwen3). RoPE: default and llama3 scaling (rope_theta either top level or under rope_parameters,
 * transformers 5), or a GGUF file's rope_freqs.weight divisors. */
#ifndef QLT_MODEL_CONFIG_H
#define QLT_MODEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

typedef enum qlt_arch {
    QLT_ARCH_LLAMA = 0,
    QLT_ARCH_QWEN2,
    QLT_ARCH_QWEN3,
    QLT_ARCH_MISTRAL,
    QLT_ARCH_GEMMA2, /* Gemma2ForCausalLM (model/gemma_config.c) */
    QLT_ARCH_GEMMA3, /* Gemma3ForCausalLM, the text model */
    QLT_ARCH_PHI3, /* Phi-3 / Phi-4: fused qkv_proj / gate_up_proj (model/fused_proj.h), LongRoPE, partial rotary */
} qlt_arch;

typedef enum qlt_rope_type {
    QLT_ROPE_DEFAULT = 0,
    QLT_ROPE_LLAMA3,
    QLT_ROPE_FACTORS, /* default frequencies divided by rope_factors[i] (llama.cpp's rope_freqs.weight) */
    QLT_ROPE_LINEAR,  /* default frequencies divided by rope_factor (transformers' "linear"; Gemma 3) */
    QLT_ROPE_LONGROPE, /* Phi-3's LongRoPE ("su"): short / long factors, attention factor (model/longrope.h) */
} qlt_rope_type;

#define QLT_MAX_ROPE_FACTORS 256 /* head_dim / 2 for the largest head_dim (512) */
#define QLT_MAX_LAYERS 1024     /* layers a sliding-window configuration may describe */

typedef struct qlt_model_config {
    qlt_arch arch;
    char arch_name[64];
    int hidden;        /* hidden_size */
    int n_layers;      /* num_hidden_layers */
    int n_heads;       /* num_attention_heads */
    int n_kv_heads;    /* num_key_value_heads */
    int head_dim;      /* head_dim, or hidden / n_heads */
    int intermediate;  /* intermediate_size */
    int vocab;         /* vocab_size */
    float rms_eps;     /* rms_norm_eps */
    double rope_theta;
    qlt_rope_type rope_type;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    float rope_factors[QLT_MAX_ROPE_FACTORS]; /* [head_dim / 2], QLT_ROPE_FACTORS only */
    /* LongRoPE (QLT_ROPE_LONGROPE): frequencies divided by short_factor[i] while every position of a batch is
     * below rope_original_max_pos, else by long_factor[i]; cos and sin times rope_attn_factor. [rotary / 2] */
    float rope_short_factor[QLT_MAX_ROPE_FACTORS], rope_long_factor[QLT_MAX_ROPE_FACTORS];
    float rope_attn_factor; /* LongRoPE's; 0 (or 1): none */
    int rotary_dim;         /* dims of each head that rotate (Phi-3's partial_rotary_factor); 0 = all head_dim */
    int context_length; /* max_position_embeddings / <arch>.context_length; informational, 0 = unknown */
    int tie_word_embeddings;
    int attention_bias; /* q/k/v have bias (Qwen2; Llama attention_bias) */
    int qk_norm;        /* Qwen3 */
    int sliding_window; /* sliding-window attention span: query t sees keys j with t - j < sliding_window (as
                           transformers' sliding_window_overlay); 0 = none (or Qwen2's use_sliding_window false) */
    /* which layers slide (1) and which attend fully (0): every layer for Mistral; Qwen2 the layers from
     * max_window_layers on; transformers 5 lists them in layer_types. Read only when sliding_window > 0. */
    unsigned char layer_sliding[QLT_MAX_LAYERS];
    /* Gemma 2 / 3 (model/gemma_config.c; 0 for the other families) */
    int gemma;                    /* Gemma's layer: (1 + w) norms, post-norms around attention and MLP, GeGLU, embeddings
                                     scaled by sqrt(hidden) */
    double query_pre_attn_scalar; /* the attention scale is query_pre_attn_scalar ** -0.5 (0: head_dim's) */
    float attn_softcap;           /* attn_logit_softcapping: scores s -> cap tanh(s / cap); 0 = none */
    float final_softcap;          /* final_logit_softcapping: logits likewise; 0 = none */
    /* sliding layers' RoPE (Gemma: rope_local_base_freq / rope_parameters.sliding_attention); the fields above
     * (rope_theta, rope_type, rope_factor) are the full-attention layers' */
    double rope_local_theta;
    qlt_rope_type rope_local_type; /* QLT_ROPE_DEFAULT or QLT_ROPE_LINEAR */
    double rope_local_factor;
} qlt_model_config;

/* Dims of each head the rotary embedding turns (the first ones; the rest pass through). */
static inline int qlt_model_rotary_dim(const qlt_model_config *mc) {
    return mc->rotary_dim > 0 ? mc->rotary_dim : mc->head_dim;
}
/* 1 when the checkpoint fuses q/k/v into qkv_proj and gate/up into gate_up_proj (Phi-3). */
static inline int qlt_model_fused(const qlt_model_config *mc) { return mc->arch == QLT_ARCH_PHI3; }
/* 1 when the rotary embedding needs the backend's rope_scaled (partial rotary or an attention factor) and
 * frequencies picked per batch (LongRoPE): the CPU backend's only. */
static inline int qlt_model_rope_scaled(const qlt_model_config *mc) {
    return qlt_model_rotary_dim(mc) != mc->head_dim || (mc->rope_attn_factor != 0.0f && mc->rope_attn_factor != 1.0f) ||
           mc->rope_type == QLT_ROPE_LONGROPE;
}

/* config.json's "layer_types" (transformers 5: "full_attention" / "sliding_attention" a layer) into
 * mc->layer_sliding: 1 when listed, 0 when absent or null, -1 with qlt_fail naming path. */
struct cJSON;
int qlt_model_parse_layer_types(qlt_model_config *mc, const struct cJSON *root, const char *path);

/* The window of layer l (0: full causal attention). */
static inline int qlt_model_layer_window(const qlt_model_config *mc, int l) {
    return mc->sliding_window > 0 && l < QLT_MAX_LAYERS && mc->layer_sliding[l] ? mc->sliding_window : 0;
}
/* One line on the attention: "full causal" or "sliding window N on every layer" / "on layers 2-3 (full on
 * 0-1)" / "on 4 of 8 layers (layer_types)", what `inspect` prints. */
void qlt_model_describe_attention(const qlt_model_config *mc, char *buf, size_t size);
/* 1 when some layer slides with a window shorter than seq tokens (the window then changes what is computed). */
int qlt_model_window_matters(const qlt_model_config *mc, int seq);

/* Reads <dir>/config.json. Errors name the file and key. */
int qlt_model_config_load(qlt_model_config *mc, const char *dir);
/* Parses config.json text (path used in messages). */
int qlt_model_config_parse(qlt_model_config *mc, const char *json_text, const char *path);
/* The architecture from a GGUF file's metadata (<arch>.block_count, .embedding_length, ...; the vocabulary
 * size from tokenizer.ggml.tokens; tied embeddings when there is no output.weight; q/k/v bias when
 * blk.0.attn_q.bias exists; rope_freqs.weight as QLT_ROPE_FACTORS). Errors name the file and key. */
struct qlt_gguf;
int qlt_model_config_from_gguf(qlt_model_config *mc, const struct qlt_gguf *g);
/* inv_freq[i], i < rotary_dim/2, with the config's RoPE scaling applied (as transformers computes it; LongRoPE:
 * the short factors, qlt_longrope_inv_freq has the long ones). */
void qlt_model_rope_inv_freq(const qlt_model_config *mc, float *inv_freq);
/* inv_freq of the sliding layers' own RoPE (Gemma; the same as qlt_model_rope_inv_freq for the others). */
void qlt_model_rope_inv_freq_local(const qlt_model_config *mc, float *inv_freq);
/* Whether layer l uses the sliding layers' RoPE (Gemma's sliding layers). */
static inline int qlt_model_layer_local_rope(const qlt_model_config *mc, int l) {
    return mc->gemma && l < QLT_MAX_LAYERS && mc->layer_sliding[l];
}
/* The attention softmax scale as transformers forms it: head_dim ** -0.5 in Python (C pow in double),
 * then handed to the float32 kernel. 1.0f / sqrtf(head_dim) is 1 ulp off for e.g. 96 and 112. */
float qlt_model_attn_scale(const qlt_model_config *mc);
/* Shape [rows = out_features, cols = in_features] of projection p (0..6: q, k, v, o, gate, up, down). */
void qlt_model_proj_shape(const qlt_model_config *mc, int p, int64_t *rows, int64_t *cols);
/* Parameter counts. */
int64_t qlt_model_linear_params(const qlt_model_config *mc);  /* q,k,v,o,gate,up,down over all layers */
int64_t qlt_model_total_params(const qlt_model_config *mc);

#endif
