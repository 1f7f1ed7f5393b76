/* lora.h: the trainable LoRA adapters with PEFT semantics: for each targeted projection of each layer,
 * y = W x + scale * B (A x), A [r, in], B [out, r], scale = alpha / r (or alpha / sqrt(r) with rsLoRA).
 *
 * All trainable state lives in four contiguous float32 arenas of n_params elements on the backend
 * (params, grads, Adam m, Adam v), so one launch computes the global gradient norm and one launch runs
 * AdamW over everything. Layout: layer-major, projections in qlt_proj order, A then B. */
#ifndef QLT_LORA_H
#define QLT_LORA_H

#include <stdint.h>

#include "formats/safetensors.h"
#include "model/model.h"

/* A fused module (Phi-3's qkv_proj, gate_up_proj: model/fused_proj.h) is one adapter, A [r, in] and B
 * [sum of its projections' out, r], as PEFT has it: each of its projections' slots points at the same A and at
 * its own rows of B, so y_p = W_p x + scale B_p (A x) and A's gradient sums over them. */
typedef struct qlt_lora_slot {
    int active;       /* this projection carries an adapter */
    int64_t in, out;  /* out: this projection's rows */
    int64_t offset_a; /* element offset of A in the arenas (shared by a fused module's projections) */
    int64_t offset_b; /* element offset of this projection's rows of B; a module's B follows its A */
    int module_first; /* the first projection of its module (itself unless fused): the slot that owns A and B */
    int64_t module_out; /* rows of the module's B (out unless fused) */
} qlt_lora_slot;

typedef struct qlt_lora {
    int r;
    float alpha;
    float scale;
    int rslora;
    unsigned targets;    /* QLT_TARGET_* bits */
    float dropout;
    int n_layers;
    int fused;           /* the model fuses q/k/v and gate/up (qlt_model_fused): PEFT names qkv_proj, gate_up_proj */
    qlt_lora_slot (*slots)[QLT_PROJ_COUNT]; /* [n_layers][QLT_PROJ_COUNT] */
    int64_t n_params;
    qlt_backend *be;
    float *params, *grads, *m, *v; /* backend memory, [n_params] each */
} qlt_lora;

/* Element offset of this projection's B [out, r] in the arenas (a module's own B: right after its A [r, in]). */
static inline int64_t qlt_lora_offset_b(const qlt_lora *lora, const qlt_lora_slot *s) {
    (void)lora;
    return s->offset_b;
}
/* 1 when slot p of a layer owns a PEFT module's A and B (every active slot but a fused module's later ones). */
static inline int qlt_lora_owns_module(const qlt_lora_slot *s, int p) { return s->active && s->module_first == p; }

/* The groups of projections that read one input, in forward order: q/k/v (from the attention norm), o,
 * gate/up (from the MLP norm, stacked), down. The forward hands each to the backend as one linear group
 * (qlt_ag_linear_group) and qlt_lora_create sizes the backend's workspaces for the same groups. A group is
 * the consecutive projections first .. first + count - 1 in qlt_proj order. */
enum { QLT_GROUP_QKV = 0, QLT_GROUP_O, QLT_GROUP_GATE_UP, QLT_GROUP_DOWN, QLT_GROUP_COUNT };
typedef struct qlt_proj_group {
    qlt_proj first;
    int count;
} qlt_proj_group;
extern const qlt_proj_group qlt_proj_groups[QLT_GROUP_COUNT];

/* The QLT_TARGET_* bit (config.h) of projection p. */
unsigned qlt_lora_target_bit(qlt_proj p);

/* Allocates adapters for `targets` on every layer; parameters zero (use init or load next). */
int qlt_lora_create(qlt_lora *lora, const qlt_model *model, int r, float alpha, unsigned targets, int rslora,
                    float dropout);
/* PEFT default init: A ~ kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), B = 0, from seed. */
void qlt_lora_init_default(qlt_lora *lora, uint64_t seed);
/* Reads adapter_config.json (r, lora_alpha, target_modules, use_rslora, lora_dropout) of a PEFT dir. */
int qlt_lora_read_peft_config(const char *dir, int *r, float *alpha, unsigned *targets, int *rslora, float *dropout);
/* Loads A/B values from a PEFT adapter dir into an existing lora (shapes and targets must match). */
int qlt_lora_load_peft(qlt_lora *lora, const char *dir);
/* The PEFT tensor of layer `layer`, projection p, matrix which ('A' [r, in] or 'B' [out, r]) in an open
 * adapter_model.safetensors, checked to be a float matrix of that shape: 0, or -1 with qlt_fail naming the
 * file and the tensor (missing, or another shape: an adapter of another model). */
int qlt_lora_peft_tensor(const qlt_st_file *f, int layer, qlt_proj p, char which, int r, int64_t in, int64_t out,
                         const qlt_st_tensor **t);
/* Writes adapter_config.json + adapter_model.safetensors (F32) into dir (which must exist). */
int qlt_lora_save_peft(const qlt_lora *lora, const qlt_model_config *mc, const char *base_model, const char *dir);
/* The same from host_params float [n_params], the adapter already downloaded (a checkpoint holds it anyway). */
int qlt_lora_save_peft_host(const qlt_lora *lora, const float *host_params, const qlt_model_config *mc,
                            const char *base_model, const char *dir);
/* PEFT tensor name of layer l, projection p, matrix 'A' or 'B'. */
void qlt_lora_tensor_name(char *buf, size_t size, int layer, qlt_proj p, char which);
/* The same for the module that owns slot p of lora (fused: qkv_proj, gate_up_proj). */
void qlt_lora_module_tensor_name(const qlt_lora *lora, char *buf, size_t size, int layer, qlt_proj p, char which);
/* qlt_lora_peft_tensor with the module named by fused (qlt_model_fused) and out the module's rows. */
int qlt_lora_peft_module_tensor(const qlt_st_file *f, int fused, int layer, qlt_proj p, char which, int r, int64_t in,
                                int64_t out, const qlt_st_tensor **t);
void qlt_lora_free(qlt_lora *lora);

#endif
