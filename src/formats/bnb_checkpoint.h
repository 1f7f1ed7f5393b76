/* bnb_checkpoint.h: bitsandbytes 4-bit checkpoints (what transformers' save_pretrained writes for a model
 * loaded with BitsAndBytesConfig(load_in_4bit=True)): detect them, read one linear module's NF4 weight
 * into a host qlt_nf4, and write one in the same form.
 *
 * For a module P (e.g. "model.layers.0.mlp.down_proj") the checkpoint holds, besides P.bias if any:
 *   P.weight                                  U8  [ceil(n/2), 1]   packed codes
 *   P.weight.absmax                           F32 [nblocks]  (U8 [nblocks] with double quant)
 *   P.weight.quant_map                        F32 [16]
 *   P.weight.nested_absmax                    F32 [ceil(nblocks/256)]          (double quant)
 *   P.weight.nested_quant_map                 F32 [256]                        (double quant)
 *   P.weight.quant_state.bitsandbytes__nf4    U8  [len]  the bytes of json.dumps({"quant_type": "nf4",
 *       "blocksize": 64, "dtype": "bfloat16", "shape": [out, in], "nested_blocksize": 256,
 *       "nested_dtype": "float32", "nested_offset": <float>})  (QuantState.as_dict(packed=True))
 * and config.json carries "quantization_config" {"quant_method": "bitsandbytes", "load_in_4bit": true, ...}.
 * Only linear layers are quantized; embeddings, norms and lm_head stay in their dtype. */
#ifndef QLT_BNB_CHECKPOINT_H
#define QLT_BNB_CHECKPOINT_H

#include <stdint.h>

#include "common/dtype.h"
#include "formats/safetensors.h"
#include "nf4/nf4.h"

typedef struct qlt_bnb_config {
    int double_quant; /* bnb_4bit_use_double_quant */
} qlt_bnb_config;

struct cJSON;
/* The one validation of a config.json "quantization_config" value qc (NULL or null: not quantized):
 * returns 1 and fills cfg (may be NULL) for bitsandbytes 4-bit NF4, 0 when not quantized, -1 with
 * qlt_fail naming path for anything else (8-bit, fp4, another quant_method, a quant_storage other than
 * uint8, a compute dtype other than float32 / float16 / bfloat16). */
int qlt_bnb_check_config(const struct cJSON *qc, const char *path, qlt_bnb_config *cfg);
/* Reads <model_dir>/config.json and applies qlt_bnb_check_config to its quantization_config (-1 too for
 * unreadable JSON). */
int qlt_bnb_detect(const char *model_dir, qlt_bnb_config *cfg);

/* True when the directory holds P.weight.quant_state.bitsandbytes__nf4 (P quantized). */
int qlt_bnb_module_is_quantized(const qlt_st_dir *d, const char *module);

/* Reads module P's weight into q (host; allocated here, free with qlt_nf4_free_host), its shape
 * (shape[0] = out_features, shape[1] = in_features; *ndim <= QLT_MAX_DIMS dims in general) and the dtype
 * it was quantized from. Every tensor's dtype and shape and the quant_state JSON are validated; errors
 * name the tensor. */
int qlt_bnb_read_module(const qlt_st_dir *d, const char *module, qlt_nf4 *q, int64_t *shape, int *ndim,
                        qlt_dtype *orig_dtype);

/* Adds P.weight and its quant-state tensors for q (host) to the writer, as bitsandbytes names them.
 * orig_dtype is the dtype the weight was quantized from (F32, F16 or BF16). */
void qlt_bnb_write_module(qlt_st_writer *w, const char *module, const qlt_nf4 *q, const int64_t *shape, int ndim,
                          qlt_dtype orig_dtype);

/* The quant_state JSON exactly as json.dumps writes it (heap string). */
char *qlt_bnb_quant_state_json(const qlt_nf4 *q, const int64_t *shape, int ndim, qlt_dtype orig_dtype);

/* Python's repr() of a double (shortest round-trip digits; "0.1", "1e-05", "3.0"): writes into buf. */
void qlt_py_float_repr(double v, char *buf, int size);

#endif
