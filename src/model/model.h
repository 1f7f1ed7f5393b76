/* model.h: the frozen base model on a backend: embeddings, per-layer norms and projections (dense or
 * NF4), final norm and lm_head (tied to the embeddings or not). Loading streams tensor by tensor from
 * the safetensors files or the GGUF file (mmapped), so host memory holds one tensor at a time beyond the
 * mapping. */
#ifndef QLT_MODEL_H
#define QLT_MODEL_H

#include "backend/backend.h"
#include "model/model_config.h"

/* Projection slots, in PEFT target order. */
typedef enum qlt_proj {
    QLT_PROJ_Q = 0,
    QLT_PROJ_K,
    QLT_PROJ_V,
    QLT_PROJ_O,
    QLT_PROJ_GATE,
    QLT_PROJ_UP,
    QLT_PROJ_DOWN,
    QLT_PROJ_COUNT
} qlt_proj;

/* "q_proj", "self_attn" etc. for tensor names. */
const char *qlt_proj_name(qlt_proj p);   /* "q_proj" */
const char *qlt_proj_parent(qlt_proj p); /* "self_attn" or "mlp" */

typedef struct qlt_layer {
    float *attn_norm;            /* [hidden] input_layernorm */
    float *mlp_norm;             /* [hidden] post_attention_layernorm (Gemma: pre_feedforward_layernorm) */
    float *post_attn_norm, *post_mlp_norm; /* [hidden] Gemma's post_attention_ / post_feedforward_layernorm, else NULL */
    qlt_weight proj[QLT_PROJ_COUNT]; /* q [nh*hd, H], k/v [nkv*hd, H], o [H, nh*hd], gate/up [I, H], down [H, I] */
    float *bias[3];              /* q/k/v bias [out] or NULL */
    float *q_norm, *k_norm;      /* [head_dim] (Qwen3) or NULL */
} qlt_layer;

typedef struct qlt_model {
    qlt_model_config cfg;
    qlt_backend *be;
    qlt_weight embed;    /* [vocab, hidden], dense */
    qlt_weight lm_head;  /* [vocab, hidden]; shares embed's data when tied (tie_word_embeddings), even
                            when the checkpoint also stores an lm_head.weight: transformers ties it too */
    int lm_head_shared;
    float *final_norm;   /* [hidden] */
    float *inv_freq;     /* [rotary_dim / 2] RoPE frequencies (LongRoPE: the short factors') */
    float *inv_freq_local; /* [head_dim / 2] Gemma's sliding layers' RoPE frequencies, else NULL */
    float *inv_freq_long; /* [rotary_dim / 2] LongRoPE's long factors' frequencies, else NULL */
    qlt_layer *layers;   /* [n_layers] */
    int quantized;       /* linear layers are NF4 */
} qlt_model;

typedef struct qlt_model_load_opts {
    int nf4;            /* quantize linear layers to NF4 */
    int nf4_blocksize;  /* 64 */
    int double_quant;   /* 1 */
    int shapes_only;    /* qlt_model_init_random: no values generated, weight_create given no host data (a
                           backend in planning mode, src/train/memory_plan.c) */
} qlt_model_load_opts;

/* Loads dir (config.json + safetensors) onto be; a path that is a file is read as GGUF. */
int qlt_model_load(qlt_model *m, qlt_backend *be, const char *dir, const qlt_model_load_opts *opts);
/* Loads a llama.cpp .gguf file onto be (model_gguf.c): architecture from its metadata, tensors by GGUF name
 * mapped onto the Hugging Face layout (llama.cpp's q/k row order undone), each dequantized to float32
 * and then stored as opts asks (NF4 or dense). */
int qlt_model_load_gguf(qlt_model *m, qlt_backend *be, const char *path, const qlt_model_load_opts *opts);
/* 0 when backend be can run the architecture c (else -1 with qlt_fail naming path: Phi-3's partial rotary /
 * LongRoPE attention factor need be->rope_scaled); checked before any weight is read. */
int qlt_model_check_backend(const qlt_model_config *c, const qlt_backend *be, const char *path);
/* The RoPE frequencies of a batch whose largest position is max_position (LongRoPE: short or long). */
static inline const float *qlt_model_inv_freq(const qlt_model *m, int max_position) {
    return m->inv_freq_long && max_position + 1 > m->cfg.rope_original_max_pos ? m->inv_freq_long : m->inv_freq;
}
/* The last step of both model builders: uploads the RoPE frequencies of m->cfg into m->inv_freq,
 * prepares each layer's gate+up stack (be->weight_stack_prepare) and q/k/v biases (be->bias_prepare).
 * 0 or -1 with qlt_fail. */
int qlt_model_finish(qlt_model *m);
/* model.path semantics: a model directory, a .gguf file, or "random:<config.json>" for random weights of
 * that architecture (seeded). */
int qlt_model_open(qlt_model *m, qlt_backend *be, const char *path, const qlt_model_load_opts *opts, uint64_t seed);
/* The directory holding the model's files (tokenizer.json, config.json): path, or the config's dir (for
 * random:) or the file's dir (for a .gguf file). Heap. */
char *qlt_model_dir_of(const char *path);
/* A model of the given architecture with random weights (std 0.02, norms 1), no files needed. */
int qlt_model_init_random(qlt_model *m, qlt_backend *be, const qlt_model_config *cfg, uint64_t seed,
                          const qlt_model_load_opts *opts);
/* The model model.path names (a directory, a .gguf file or random:CONFIG.json) as shapes and formats only, on a
 * backend in planning mode (backend.h plan_begin): its config read, nothing else (model_shapes.c). A bitsandbytes
 * 4-bit checkpoint is NF4 whatever opts says. 0 or -1 with qlt_fail naming the file. */
int qlt_model_init_shapes(qlt_model *m, qlt_backend *be, const char *path, const qlt_model_load_opts *opts);
void qlt_model_free(qlt_model *m);

#endif
