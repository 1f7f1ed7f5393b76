/* fused_proj.c: Phi-3's qkv_proj / gate_up_proj loaded into separate projection weights (see fused_proj.h). */
#include "model/fused_proj.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "formats/bnb_checkpoint.h"
#include "nf4/nf4_slice.h"

qlt_fused_module qlt_fused_module_of(const qlt_model_config *mc, qlt_proj p) {
    qlt_fused_module f = {p, 1};
    if (!qlt_model_fused(mc)) return f;
    if (p <= QLT_PROJ_V) f = (qlt_fused_module){QLT_PROJ_Q, 3};
    if (p == QLT_PROJ_GATE || p == QLT_PROJ_UP) f = (qlt_fused_module){QLT_PROJ_GATE, 2};
    return f;
}

void qlt_fused_module_shape(const qlt_model_config *mc, qlt_proj first, int64_t *rows, int64_t *cols) {
    qlt_fused_module fm = qlt_fused_module_of(mc, first);
    *rows = 0;
    for (int j = 0; j < fm.count; j++) {
        int64_t r;
        qlt_model_proj_shape(mc, fm.first + j, &r, cols);
        *rows += r;
    }
}

const char *qlt_fused_module_name(const qlt_model_config *mc, qlt_proj p) {
    qlt_fused_module f = qlt_fused_module_of(mc, p);
    if (f.count == 3) return "qkv_proj";
    if (f.count == 2) return "gate_up_proj";
    return qlt_proj_name(p);
}

void qlt_fused_describe(const qlt_model_config *mc, char *buf, size_t size) {
    buf[0] = 0;
    if (!qlt_model_fused(mc)) return;
    int64_t q, k, v, gate, up, cols;
    qlt_model_proj_shape(mc, QLT_PROJ_Q, &q, &cols);
    qlt_model_proj_shape(mc, QLT_PROJ_K, &k, &cols);
    qlt_model_proj_shape(mc, QLT_PROJ_V, &v, &cols);
    qlt_model_proj_shape(mc, QLT_PROJ_GATE, &gate, &cols);
    qlt_model_proj_shape(mc, QLT_PROJ_UP, &up, &cols);
    snprintf(buf, size, "qkv_proj [q %lld | k %lld | v %lld rows] and gate_up_proj [gate %lld | up %lld rows], "
             "held as separate weights (NF4 quantized whole first); one LoRA adapter each (lora.targets q, k, v and "
             "gate, up name them together)", (long long)q, (long long)k, (long long)v, (long long)gate, (long long)up);
}

/* The host NF4 form of the whole fused tensor: quantized here from its stored values, or as stored. */
static int whole_nf4(const qlt_st_dir *d, const char *dir, const char *module, int pre_quantized, int64_t rows,
                     int64_t cols, int blocksize, int double_quant, qlt_nf4 *q) {
    char name[256];
    if (pre_quantized && qlt_bnb_module_is_quantized(d, module)) {
        int64_t shape[QLT_MAX_DIMS];
        int ndim;
        qlt_dtype orig;
        if (qlt_bnb_read_module(d, module, q, shape, &ndim, &orig) != 0) return qlt_fail_context("%s", dir);
        if (ndim != 2 || shape[0] != rows || shape[1] != cols) {
            qlt_nf4_free_host(q);
            return qlt_fail("%s: quantized module '%s' is not [%lld, %lld] as config.json implies", dir, module,
                            (long long)rows, (long long)cols);
        }
        return 0;
    }
    snprintf(name, sizeof name, "%s.weight", module);
    const qlt_st_tensor *t = qlt_st_dir_find(d, name);
    if (!t) return qlt_fail("%s: tensor '%s' is missing from the model's safetensors files", dir, name);
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols || !qlt_dtype_is_float(t->dtype))
        return qlt_fail("%s: tensor '%s' must be a float [%lld, %lld] matrix as config.json implies", dir, name,
                        (long long)rows, (long long)cols);
    QLT_TRY(qlt_nf4_alloc_host(q, rows * cols, blocksize, double_quant));
    qlt_nf4_quantize(q, t->data, t->dtype);
    return 0;
}

/* One fused module: count parts of rows[i] rows each into w[i]. */
static int load_module(qlt_model *m, const qlt_st_dir *d, const char *dir, const char *module, int count,
                       const int64_t *rows, int64_t cols, int pre_quantized, int blocksize, int double_quant,
                       qlt_weight *const *w) {
    qlt_backend *be = m->be;
    int64_t total = 0;
    for (int i = 0; i < count; i++) total += rows[i];
    int quantized = pre_quantized && qlt_bnb_module_is_quantized(d, module);
    if (!quantized && blocksize <= 0) { /* dense: each part straight from its rows of the stored tensor */
        char name[256];
        snprintf(name, sizeof name, "%s.weight", module);
        const qlt_st_tensor *t = qlt_st_dir_find(d, name);
        if (!t) return qlt_fail("%s: tensor '%s' is missing from the model's safetensors files", dir, name);
        if (t->ndim != 2 || t->shape[0] != total || t->shape[1] != cols || !qlt_dtype_is_float(t->dtype))
            return qlt_fail("%s: tensor '%s' must be a float [%lld, %lld] matrix as config.json implies", dir, name,
                            (long long)total, (long long)cols);
        size_t row_bytes = (size_t)cols * qlt_dtype_size(t->dtype);
        const char *at = t->data;
        for (int i = 0; i < count; i++) {
            if (be->weight_create(be, w[i], at, t->dtype, rows[i], cols, 0, 0) != 0)
                return qlt_fail_context("%s: tensor '%s'", dir, name);
            at += (size_t)rows[i] * row_bytes;
        }
        return 0;
    }
    qlt_nf4 whole;
    QLT_TRY(whole_nf4(d, dir, module, quantized, total, cols, blocksize, double_quant, &whole));
    int64_t start = 0;
    int rc = 0;
    for (int i = 0; i < count && rc == 0; i++) {
        if (start % whole.blocksize) {
            rc = qlt_fail("%s: '%s' cannot be cut into its projections: row %lld starts inside an NF4 block of %d "
                          "(hidden_size %lld); set model.nf4_blocksize to a divisor of %lld", dir, module,
                          (long long)(start / cols), whole.blocksize, (long long)cols, (long long)cols);
            break;
        }
        qlt_nf4 part;
        rc = qlt_nf4_slice(&whole, start, rows[i] * cols, &part);
        if (rc == 0 && be->weight_from_nf4(be, w[i], &part, rows[i], cols) != 0) {
            qlt_nf4_free_host(&part);
            rc = qlt_fail_context("%s: module '%s'", dir, module);
        }
        start += rows[i] * cols;
    }
    qlt_nf4_free_host(&whole);
    if (rc == 0) m->quantized = 1;
    return rc;
}

int qlt_fused_load_layer(qlt_model *m, const qlt_st_dir *d, const char *dir, int l, int pre_quantized, int blocksize,
                         int double_quant, qlt_layer *L) {
    const qlt_model_config *c = &m->cfg;
    const qlt_proj heads[2] = {QLT_PROJ_Q, QLT_PROJ_GATE};
    for (int f = 0; f < 2; f++) {
        qlt_fused_module fm = qlt_fused_module_of(c, heads[f]);
        int64_t rows[3], cols = 0;
        qlt_weight *w[3];
        for (int i = 0; i < fm.count; i++) {
            qlt_model_proj_shape(c, fm.first + i, &rows[i], &cols);
            w[i] = &L->proj[fm.first + i];
        }
        char module[256];
        snprintf(module, sizeof module, "model.layers.%d.%s.%s", l, qlt_proj_parent(fm.first),
                 qlt_fused_module_name(c, fm.first));
        QLT_TRY(load_module(m, d, dir, module, fm.count, rows, cols, pre_quantized, blocksize, double_quant, w));
    }
    return 0;
}
