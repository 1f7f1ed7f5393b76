/* fused_proj.h: Phi-3's fused projections. The checkpoint stores qkv_proj [q + k + v, hidden] (rows: the
 * query heads, then the key heads, then the value heads) and gate_up_proj [2 * intermediate, hidden] (gate rows
 * then up rows); the model holds them as its usual q, k, v and gate, up weights, cut along rows at load. NF4 is
 * quantized over the whole fused tensor first, as bitsandbytes quantizes the fused Linear, and then cut
 * (nf4/nf4_slice.h), so the dequantized values are bitsandbytes'. The LoRA on a fused module is still one
 * adapter (model/lora.h). */
#ifndef QLT_FUSED_PROJ_H
#define QLT_FUSED_PROJ_H

#include "formats/safetensors.h"
#include "model/model.h"

/* The fused module a projection belongs to: first and count of its projections (qkv: q, 3; gate_up: gate, 2),
 * or count 1 for a projection of its own (o, down; every projection of an unfused model). */
typedef struct qlt_fused_module {
    qlt_proj first;
    int count;
} qlt_fused_module;
qlt_fused_module qlt_fused_module_of(const qlt_model_config *mc, qlt_proj p);
/* Shape of the module projection first begins (its rows summed over the fused projections). */
void qlt_fused_module_shape(const qlt_model_config *mc, qlt_proj first, int64_t *rows, int64_t *cols);
/* The module's name in the checkpoint and in PEFT adapters: "qkv_proj", "gate_up_proj", or qlt_proj_name(p). */
const char *qlt_fused_module_name(const qlt_model_config *mc, qlt_proj p);

/* One line on the fused modules, what `inspect` prints ("" for an unfused model). */
void qlt_fused_describe(const qlt_model_config *mc, char *buf, size_t size);

/* Loads layer l's fused modules into L->proj[q, k, v, gate, up]: dense (blocksize 0), quantized to NF4 whole
 * then cut, or taken from a bitsandbytes 4-bit module (pre_quantized) and cut. Errors name dir and the
 * tensor. */
int qlt_fused_load_layer(qlt_model *m, const qlt_st_dir *d, const char *dir, int l, int pre_quantized, int blocksize,
                         int double_quant, qlt_layer *L);

#endif
