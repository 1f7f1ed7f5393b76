/* merge.c: an adapter folded into its base model's weights, tensor by tensor (see merge.h). */
#include "model/merge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "formats/bnb_checkpoint.h"
#include "model/fused_proj.h"
#include "model/lora.h"
#include "nf4/nf4.h"

/* Elements converted at a time when a tensor is only copied (bounded scratch for any tensor size). */
#define COPY_CHUNK ((int64_t)1 << 20)

void qlt_merge_weight(void *out, qlt_dtype dtype, const float *w, const float *a, const float *b, int64_t rows,
                      int64_t cols, int r, double scale) {
    size_t esize = qlt_dtype_size(dtype);
#pragma omp parallel
    {
        double *acc = qlt_xmalloc(sizeof(double) * (size_t)cols);
#pragma omp for schedule(static)
        for (int64_t o = 0; o < rows; o++) {
            for (int64_t i = 0; i < cols; i++) acc[i] = 0.0;
            for (int k = 0; k < r; k++) { /* row o of B . A, k in order: the same sum on any thread count */
                double bk = b[o * r + k];
                const float *ak = a + (int64_t)k * cols;
                for (int64_t i = 0; i < cols; i++) acc[i] += bk * (double)ak[i];
            }
            const float *wo = w + o * cols;
            for (int64_t i = 0; i < cols; i++) acc[i] = (double)wo[i] + scale * acc[i];
            qlt_convert_from_f64((char *)out + (size_t)(o * cols) * esize, dtype, acc, (size_t)cols);
        }
        free(acc);
    }
}

/* "model.layers.<l>.<parent>.<proj>.weight" -> l and p; 0 when name is no projection weight of this model. A
 * fused module (Phi-3's qkv_proj, gate_up_proj: model/fused_proj.h) gives its first projection. */
static int parse_projection(const qlt_model_config *c, const char *name, int n_layers, int *layer, qlt_proj *proj) {
    int l, n = 0;
    char parent[32], pname[32];
    if (sscanf(name, "model.layers.%d.%31[^.].%31[^.].weight%n", &l, parent, pname, &n) != 3 || name[n] != '\0' ||
        l < 0 || l >= n_layers)
        return 0;
    for (int p = 0; p < QLT_PROJ_COUNT; p++) {
        if ((int)qlt_fused_module_of(c, (qlt_proj)p).first != p) continue;
        if (strcmp(pname, qlt_fused_module_name(c, p)) == 0 && strcmp(parent, qlt_proj_parent(p)) == 0) {
            *layer = l;
            *proj = p;
            return 1;
        }
    }
    return 0;
}

/* The module a bitsandbytes tensor belongs to, when that module is quantized: "P.weight" (the codes) and
 * "P.weight.<state>" (absmax, quant_map, ...) give P. Returns 1 = the codes, 2 = a state tensor, 0 = neither. */
static int bnb_part(const qlt_st_dir *d, const char *name, char *module, size_t size) {
    const char *w = strstr(name, ".weight");
    while (w && w[7] != '\0' && w[7] != '.') w = strstr(w + 1, ".weight");
    if (!w || (size_t)(w - name) >= size) return 0;
    snprintf(module, size, "%.*s", (int)(w - name), name);
    if (!qlt_bnb_module_is_quantized(d, module)) return 0;
    return w[7] == '\0' ? 1 : 2;
}

static void add_tensor(qlt_merge *m, const qlt_st_tensor *t) {
    m->tensors = qlt_xrealloc(m->tensors, (size_t)(m->n_tensors + 1) * sizeof *m->tensors);
    qlt_merge_tensor *x = &m->tensors[m->n_tensors++];
    memset(x, 0, sizeof *x);
    x->name = qlt_xstrdup(t->name);
    x->ndim = t->ndim;
    memcpy(x->shape, t->shape, sizeof x->shape);
    x->src_dtype = t->dtype;
    x->src = t;
    x->layer = -1;
}

/* Lists the output tensors of the source and marks the projections. */
static int list_tensors(qlt_merge *m) {
    const qlt_model_config *c = &m->cfg;
    int *seen = qlt_xcalloc((size_t)c->n_layers * QLT_PROJ_COUNT, sizeof *seen);
    int rc = 0;
    char module[512];
    for (int fi = 0; fi < m->src.n_files && rc == 0; fi++) {
        const qlt_st_file *f = &m->src.files[fi];
        for (int ti = 0; ti < f->n_tensors && rc == 0; ti++) {
            const qlt_st_tensor *t = &f->tensors[ti];
            int part = m->bnb ? bnb_part(&m->src, t->name, module, sizeof module) : 0;
            if (part == 2) continue; /* folded into its module's dense weight */
            if (c->tie_word_embeddings && strcmp(t->name, "lm_head.weight") == 0) continue; /* tied: not stored */
            int l;
            qlt_proj p;
            if (!parse_projection(c, t->name, c->n_layers, &l, &p)) {
                if (part == 1)
                    rc = qlt_fail("%s: module '%s' is quantized, but only the q/k/v/o/gate/up/down projections of a "
                                  "bitsandbytes checkpoint can be dequantized here", f->path, module);
                else
                    add_tensor(m, t);
                continue;
            }
            int64_t rows, cols;
            qlt_fused_module_shape(c, p, &rows, &cols);
            if (seen[l * QLT_PROJ_COUNT + p]) {
                rc = qlt_fail("%s: tensor '%s' is stored twice in the model's safetensors files", f->path, t->name);
                break;
            }
            for (int j = 0; j < qlt_fused_module_of(c, p).count; j++) seen[l * QLT_PROJ_COUNT + p + j] = 1;
            if (part != 1 && (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols || !qlt_dtype_is_float(t->dtype))) {
                char got[64];
                qlt_st_format_shape(got, sizeof got, t->ndim, t->shape);
                rc = qlt_fail("%s: tensor '%s' is %s [%s]; config.json implies a float [%lld, %lld]", f->path, t->name,
                              qlt_dtype_name(t->dtype), got, (long long)rows, (long long)cols);
                break;
            }
            add_tensor(m, t);
            qlt_merge_tensor *x = &m->tensors[m->n_tensors - 1];
            x->ndim = 2;
            x->shape[0] = rows;
            x->shape[1] = cols;
            x->layer = l;
            x->proj = p;
            x->bnb = part == 1;
            x->adapter = (m->targets & qlt_lora_target_bit(p)) != 0;
            m->n_merged += x->adapter;
        }
    }
    for (int l = 0; l < c->n_layers && rc == 0; l++)
        for (int p = 0; p < QLT_PROJ_COUNT && rc == 0; p++)
            if (!seen[l * QLT_PROJ_COUNT + p])
                rc = qlt_fail("%s: tensor 'model.layers.%d.%s.%s.weight' is missing from the model's safetensors files",
                              m->model_dir, l, qlt_proj_parent(p), qlt_fused_module_name(c, p));
    free(seen);
    return rc;
}

/* Every adapter tensor fits its projection, and the adapter holds nothing else. */
static int check_adapter(qlt_merge *m) {
    int used = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        for (int p = 0; p < QLT_PROJ_COUNT; p++) {
            if (!(m->targets & qlt_lora_target_bit(p)) || (int)qlt_fused_module_of(&m->cfg, p).first != p) continue;
            int64_t rows, cols;
            qlt_fused_module_shape(&m->cfg, p, &rows, &cols);
            const qlt_st_tensor *t;
            const int fused = qlt_model_fused(&m->cfg);
            QLT_TRY(qlt_lora_peft_module_tensor(&m->adapter, fused, l, p, 'A', m->r, cols, rows, &t));
            QLT_TRY(qlt_lora_peft_module_tensor(&m->adapter, fused, l, p, 'B', m->r, cols, rows, &t));
            used += 2;
        }
    }
    if (used != m->adapter.n_tensors)
        return qlt_fail("%s: holds %d tensors, but its adapter_config.json's target_modules on the model's %d layers "
                        "name %d (an adapter of another model?)", m->adapter.path, m->adapter.n_tensors,
                        m->cfg.n_layers, used);
    return 0;
}

int qlt_merge_open(qlt_merge *m, const char *model_dir, const char *adapter_dir, const qlt_merge_opts *opts) {
    memset(m, 0, sizeof *m);
    m->opts = *opts;
    m->model_dir = qlt_xstrdup(model_dir);
    m->adapter_dir = qlt_xstrdup(adapter_dir);
    int rc = qlt_model_config_load(&m->cfg, model_dir);
    qlt_bnb_config bc;
    int bnb = rc == 0 ? qlt_bnb_detect(model_dir, &bc) : 0;
    if (bnb < 0) rc = -1;
    m->bnb = bnb == 1;
    if (rc == 0 && m->bnb && opts->onto == QLT_MERGE_ONTO_ORIGINAL)
        rc = qlt_fail("%s is a bitsandbytes 4-bit checkpoint: it holds no unquantized weights to merge onto; use "
                      "--onto dequantized (the weights the adapter was trained against)", model_dir);
    if (rc == 0 && !m->bnb && opts->onto == QLT_MERGE_ONTO_DEQUANTIZED)
        rc = qlt_nf4_check_blocksize(opts->nf4_blocksize);
    float dropout;
    if (rc == 0) rc = qlt_lora_read_peft_config(adapter_dir, &m->r, &m->alpha, &m->targets, &m->rslora, &dropout);
    m->scale = m->rslora ? (double)m->alpha / sqrt((double)m->r) : (double)m->alpha / (double)m->r;
    if (rc == 0) {
        char *path = qlt_path_join(adapter_dir, "adapter_model.safetensors");
        rc = qlt_st_open(&m->adapter, path);
        free(path);
    }
    if (rc == 0) rc = qlt_st_dir_open(&m->src, model_dir);
    if (rc == 0) rc = list_tensors(m);
    if (rc == 0) rc = check_adapter(m);
    if (rc != 0) qlt_merge_close(m);
    return rc;
}

qlt_dtype qlt_merge_out_dtype(const qlt_merge *m, int i, qlt_dtype dtype) {
    const qlt_merge_tensor *x = &m->tensors[i];
    return x->layer >= 0 || qlt_dtype_is_float(x->src_dtype) ? dtype : x->src_dtype;
}

int64_t qlt_merge_numel(const qlt_merge *m, int i) {
    int64_t n = 1;
    for (int d = 0; d < m->tensors[i].ndim; d++) n *= m->tensors[i].shape[d];
    return n;
}

int qlt_merge_find(const qlt_merge *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return -1;
}

/* The base weight W of projection x as float32 [rows, cols]: as stored, or its NF4 round trip. */
static int read_base(const qlt_merge *m, const qlt_merge_tensor *x, float *w) {
    int64_t numel = x->shape[0] * x->shape[1];
    qlt_nf4 q;
    if (x->bnb) {
        char module[512];
        int64_t shape[QLT_MAX_DIMS];
        int ndim;
        qlt_dtype orig;
        snprintf(module, sizeof module, "%.*s", (int)(strlen(x->name) - strlen(".weight")), x->name);
        if (qlt_bnb_read_module(&m->src, module, &q, shape, &ndim, &orig) != 0)
            return qlt_fail_context("%s", m->model_dir);
        if (ndim != 2 || shape[0] != x->shape[0] || shape[1] != x->shape[1]) {
            char got[64];
            qlt_st_format_shape(got, sizeof got, ndim, shape);
            qlt_nf4_free_host(&q);
            return qlt_fail("%s: quantized module '%s' has shape [%s]; config.json implies [%lld, %lld]", m->model_dir,
                            module, got, (long long)x->shape[0], (long long)x->shape[1]);
        }
    } else {
        qlt_st_read_f32(x->src, w);
        /* a projection a bitsandbytes checkpoint left unquantized is NF4 only with model.quant: nf4 */
        if (m->opts.onto == QLT_MERGE_ONTO_ORIGINAL || m->opts.nf4_blocksize <= 0) return 0;
        /* as the model loader quantizes it (model.quant: nf4): float32 first, then the codec */
        if (qlt_nf4_alloc_host(&q, numel, m->opts.nf4_blocksize, m->opts.double_quant) != 0)
            return qlt_fail_context("%s: tensor '%s'", m->model_dir, x->name);
        qlt_nf4_quantize_f32(&q, w);
    }
    qlt_nf4_dequantize_f32(&q, w);
    qlt_nf4_free_host(&q);
    return 0;
}

static void copy_converted(const qlt_merge_tensor *x, int64_t numel, qlt_dtype dtype, void *out) {
    if (!qlt_dtype_is_float(x->src_dtype) || x->src_dtype == dtype) {
        memcpy(out, x->src->data, x->src->nbytes);
        return;
    }
    size_t in_size = qlt_dtype_size(x->src_dtype), out_size = qlt_dtype_size(dtype);
    float *buf = qlt_xmalloc(sizeof(float) * (size_t)(numel < COPY_CHUNK ? numel : COPY_CHUNK));
    for (int64_t at = 0; at < numel; at += COPY_CHUNK) {
        int64_t n = numel - at < COPY_CHUNK ? numel - at : COPY_CHUNK;
        qlt_convert_to_f32(buf, (const char *)x->src->data + (size_t)at * in_size, x->src_dtype, (size_t)n);
        qlt_convert_from_f32((char *)out + (size_t)at * out_size, dtype, buf, (size_t)n);
    }
    free(buf);
}

int qlt_merge_read(const qlt_merge *m, int i, qlt_dtype dtype, void *out) {
    QLT_ASSERT(dtype == QLT_DTYPE_F32 || dtype == QLT_DTYPE_F16 || dtype == QLT_DTYPE_BF16);
    const qlt_merge_tensor *x = &m->tensors[i];
    int64_t numel = qlt_merge_numel(m, i);
    if (x->layer < 0) {
        copy_converted(x, numel, dtype, out);
        return 0;
    }
    float *w = qlt_xmalloc(sizeof(float) * (size_t)numel);
    if (read_base(m, x, w) != 0) {
        free(w);
        return -1;
    }
    if (!x->adapter) {
        qlt_convert_from_f32(out, dtype, w, (size_t)numel);
        free(w);
        return 0;
    }
    const qlt_st_tensor *ta, *tb;
    const int fused = qlt_model_fused(&m->cfg);
    QLT_ASSERT(qlt_lora_peft_module_tensor(&m->adapter, fused, x->layer, x->proj, 'A', m->r, x->shape[1], x->shape[0],
                                           &ta) == 0);
    QLT_ASSERT(qlt_lora_peft_module_tensor(&m->adapter, fused, x->layer, x->proj, 'B', m->r, x->shape[1], x->shape[0],
                                           &tb) == 0);
    float *a = qlt_xmalloc(sizeof(float) * (size_t)ta->numel), *b = qlt_xmalloc(sizeof(float) * (size_t)tb->numel);
    qlt_st_read_f32(ta, a);
    qlt_st_read_f32(tb, b);
    qlt_merge_weight(out, dtype, w, a, b, x->shape[0], x->shape[1], m->r, m->scale);
    free(a);
    free(b);
    free(w);
    return 0;
}

void qlt_merge_close(qlt_merge *m) {
    for (int i = 0; i < m->n_tensors; i++) free(m->tensors[i].name);
    free(m->tensors);
    if (m->src.files) qlt_st_dir_close(&m->src);
    if (m->adapter.path) qlt_st_close(&m->adapter);
    free(m->model_dir);
    free(m->adapter_dir);
    memset(m, 0, sizeof *m);
}
