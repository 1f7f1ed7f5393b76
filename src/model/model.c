/* model.c: loads a Hugging Face decoder-only model onto a backend (see model.h). Every tensor is
 * checked for presence, shape and dtype; errors name the tensor and the file. */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "formats/bnb_checkpoint.h"
#include "formats/safetensors.h"
#include "model/gemma_model.h"
#include "model/fused_proj.h"
#include "model/longrope.h"
#include "nf4/nf4.h"

static const char *proj_names[QLT_PROJ_COUNT] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

const char *qlt_proj_name(qlt_proj p) { return proj_names[p]; }
const char *qlt_proj_parent(qlt_proj p) { return p <= QLT_PROJ_O ? "self_attn" : "mlp"; }

static int find_tensor(const qlt_st_dir *d, const char *dir, const char *name, int ndim, const int64_t *shape,
                       const qlt_st_tensor **out) {
    const qlt_st_tensor *t = qlt_st_dir_find(d, name);
    if (!t) return qlt_fail("%s: tensor '%s' is missing from the model's safetensors files", dir, name);
    if (!qlt_dtype_is_float(t->dtype))
        return qlt_fail("%s: tensor '%s' has dtype %s; expected F32, F16 or BF16", dir, name, qlt_dtype_name(t->dtype));
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[64], got[64];
        qlt_st_format_shape(want, sizeof want, ndim, shape);
        qlt_st_format_shape(got, sizeof got, t->ndim, t->shape);
        return qlt_fail("%s: tensor '%s' has shape [%s]; config.json implies [%s]", dir, name, got, want);
    }
    *out = t;
    return 0;
}

/* A small float vector (norm weight, bias) uploaded as float32. */
static int load_vector(qlt_model *m, const qlt_st_dir *d, const char *dir, const char *name, int64_t n, float **out) {
    const qlt_st_tensor *t;
    QLT_TRY(find_tensor(d, dir, name, 1, &n, &t));
    float *host = qlt_xmalloc(sizeof(float) * (size_t)n);
    qlt_st_read_f32(t, host);
    qlt_gemma_fold_norm(&m->cfg, name, host, n);
    *out = m->be->alloc(m->be, sizeof(float) * (size_t)n);
    if (!*out) {
        free(host);
        return qlt_fail("out of %s memory loading '%s'", m->be->name, name);
    }
    m->be->upload(m->be, *out, host, sizeof(float) * (size_t)n);
    free(host);
    return 0;
}

static int load_matrix(qlt_model *m, const qlt_st_dir *d, const char *dir, const char *name, int64_t rows,
                       int64_t cols, int nf4_blocksize, int double_quant, qlt_weight *w) {
    const qlt_st_tensor *t;
    int64_t shape[2] = {rows, cols};
    QLT_TRY(find_tensor(d, dir, name, 2, shape, &t));
    if (m->be->weight_create(m->be, w, t->data, t->dtype, rows, cols, nf4_blocksize, double_quant) != 0)
        return qlt_fail_context("%s: tensor '%s'", dir, name);
    return 0;
}

/* A linear weight stored by bitsandbytes as NF4: taken over as is (same bits, no requantization). */
static int load_prequantized(qlt_model *m, const qlt_st_dir *d, const char *dir, const char *module, int64_t rows,
                             int64_t cols, qlt_weight *w) {
    qlt_nf4 q;
    int64_t shape[QLT_MAX_DIMS];
    int ndim;
    qlt_dtype orig;
    if (qlt_bnb_read_module(d, module, &q, shape, &ndim, &orig) != 0) return qlt_fail_context("%s", dir);
    if (ndim != 2 || shape[0] != rows || shape[1] != cols) {
        char got[64];
        qlt_st_format_shape(got, sizeof got, ndim, shape);
        qlt_nf4_free_host(&q);
        return qlt_fail("%s: quantized module '%s' has shape [%s]; config.json implies [%lld, %lld]", dir, module, got,
                        (long long)rows, (long long)cols);
    }
    if (m->be->weight_from_nf4(m->be, w, &q, rows, cols) != 0) {
        qlt_nf4_free_host(&q);
        return qlt_fail_context("%s: module '%s'", dir, module);
    }
    return 0;
}

int qlt_model_check_backend(const qlt_model_config *c, const qlt_backend *be, const char *path) {
    if (qlt_model_rope_scaled(c) && !be->rope_scaled)
        return qlt_fail("%s: %s's rotary embedding (%d of %d dims rotate, attention factor %g) runs on the CPU only; "
                        "set train.device: cpu", path, c->arch_name, qlt_model_rotary_dim(c), c->head_dim,
                        c->rope_attn_factor ? c->rope_attn_factor : 1.0);
    return 0;
}

int qlt_model_finish(qlt_model *m) {
    size_t bytes = sizeof(float) * (size_t)(qlt_model_rotary_dim(&m->cfg) / 2);
    float *inv = qlt_xmalloc(bytes);
    qlt_model_rope_inv_freq(&m->cfg, inv);
    m->inv_freq = m->be->alloc(m->be, bytes);
    if (m->inv_freq) m->be->upload(m->be, m->inv_freq, inv, bytes);
    if (m->cfg.rope_type == QLT_ROPE_LONGROPE) { /* the long factors beside the short ones */
        qlt_longrope_inv_freq(&m->cfg, 1, inv);
        m->inv_freq_long = m->be->alloc(m->be, bytes);
        if (m->inv_freq_long) m->be->upload(m->be, m->inv_freq_long, inv, bytes);
    }
    free(inv);
    if (!m->inv_freq || (m->cfg.rope_type == QLT_ROPE_LONGROPE && !m->inv_freq_long))
        return qlt_fail("out of %s memory", m->be->name);
    QLT_TRY(qlt_gemma_finish(m));
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const qlt_layer *L = &m->layers[l];
        const qlt_weight *gate_up[2] = {&L->proj[QLT_PROJ_GATE], &L->proj[QLT_PROJ_UP]};
        QLT_TRY(m->be->weight_stack_prepare(m->be, gate_up, 2, 0));
        for (int p = 0; p < 3; p++)
            if (L->bias[p] && m->be->bias_prepare) QLT_TRY(m->be->bias_prepare(m->be, L->bias[p], L->proj[p].rows));
    }
    return 0;
}

int qlt_model_load(qlt_model *m, qlt_backend *be, const char *dir, const qlt_model_load_opts *opts) {
    size_t n = strlen(dir);
    if (qlt_file_exists(dir) || (n > 5 && strcmp(dir + n - 5, ".gguf") == 0)) return qlt_model_load_gguf(m, be, dir, opts);
    memset(m, 0, sizeof *m);
    m->be = be;
    QLT_TRY(qlt_model_config_load(&m->cfg, dir));
    QLT_TRY(qlt_gemma_backend_check(&m->cfg, be, dir)); /* before any weight is read */
    QLT_TRY(qlt_model_check_backend(&m->cfg, be, dir));
    const qlt_model_config *c = &m->cfg;
    qlt_bnb_config bnb;
    int pre_quantized = qlt_bnb_detect(dir, &bnb);
    if (pre_quantized < 0) return -1;
    qlt_st_dir d;
    QLT_TRY(qlt_st_dir_open(&d, dir));
    int rc = -1;
    int blocksize = opts && opts->nf4 ? opts->nf4_blocksize : 0;
    int dq = opts ? opts->double_quant : 0;
    m->quantized = blocksize > 0;
    int64_t h = c->hidden;
    char name[256];
    if (load_matrix(m, &d, dir, "model.embed_tokens.weight", c->vocab, h, 0, 0, &m->embed)) goto done;
    if (load_vector(m, &d, dir, "model.norm.weight", h, &m->final_norm)) goto done;
    if (c->tie_word_embeddings) { /* as transformers ties it: a stored lm_head.weight is ignored */
        m->lm_head = m->embed;
        m->lm_head_shared = 1;
    } else if (load_matrix(m, &d, dir, "lm_head.weight", c->vocab, h, 0, 0, &m->lm_head)) {
        goto done;
    }
    /* the layer table is sized by num_hidden_layers: the last layer must exist before it is allocated */
    snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", c->n_layers - 1);
    if (!qlt_st_dir_find(&d, name)) {
        qlt_fail("%s: config.json has num_hidden_layers %d but tensor %s is missing", dir, c->n_layers, name);
        goto done;
    }
    m->layers = qlt_xcalloc((size_t)c->n_layers, sizeof *m->layers);
    for (int l = 0; l < c->n_layers; l++) {
        qlt_layer *L = &m->layers[l];
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        if (load_vector(m, &d, dir, name, h, &L->attn_norm)) goto done;
        snprintf(name, sizeof name, "model.layers.%d.%s.weight", l,
                 c->gemma ? "pre_feedforward_layernorm" : "post_attention_layernorm");
        if (load_vector(m, &d, dir, name, h, &L->mlp_norm)) goto done;
        for (int i = 0; c->gemma && i < 2; i++) { /* Gemma's norms after attention and after the MLP */
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l,
                     i ? "post_feedforward_layernorm" : "post_attention_layernorm");
            if (load_vector(m, &d, dir, name, h, i ? &L->post_mlp_norm : &L->post_attn_norm)) goto done;
        }
        if (qlt_model_fused(c) && qlt_fused_load_layer(m, &d, dir, l, pre_quantized, blocksize, dq, L)) goto done;
        for (int p = 0; p < QLT_PROJ_COUNT; p++) {
            if (qlt_fused_module_of(c, (qlt_proj)p).count > 1) continue; /* loaded with its fused module */
            int64_t rows, cols;
            qlt_model_proj_shape(c, p, &rows, &cols);
            snprintf(name, sizeof name, "model.layers.%d.%s.%s", l, qlt_proj_parent(p), qlt_proj_name(p));
            if (pre_quantized && qlt_bnb_module_is_quantized(&d, name)) {
                if (load_prequantized(m, &d, dir, name, rows, cols, &L->proj[p])) goto done;
                m->quantized = 1;
                continue;
            }
            strcat(name, ".weight");
            if (load_matrix(m, &d, dir, name, rows, cols, blocksize, dq, &L->proj[p])) goto done;
        }
        if (c->attention_bias) {
            for (int p = 0; p < 3; p++) {
                snprintf(name, sizeof name, "model.layers.%d.self_attn.%s.bias", l, qlt_proj_name(p));
                if (load_vector(m, &d, dir, name, m->layers[l].proj[p].rows, &L->bias[p])) goto done;
            }
        }
        if (c->qk_norm) {
            snprintf(name, sizeof name, "model.layers.%d.self_attn.q_norm.weight", l);
            if (load_vector(m, &d, dir, name, c->head_dim, &L->q_norm)) goto done;
            snprintf(name, sizeof name, "model.layers.%d.self_attn.k_norm.weight", l);
            if (load_vector(m, &d, dir, name, c->head_dim, &L->k_norm)) goto done;
        }
    }
    rc = qlt_model_finish(m);
done:
    qlt_st_dir_close(&d);
    if (rc != 0) qlt_model_free(m);
    return rc;
}

void qlt_model_free(qlt_model *m) {
    qlt_backend *be = m->be;
    if (!be) return;
    if (m->layers) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            qlt_layer *L = &m->layers[l];
            be->free(be, L->attn_norm);
            be->free(be, L->mlp_norm);
            be->free(be, L->post_attn_norm);
            be->free(be, L->post_mlp_norm);
            for (int p = 0; p < QLT_PROJ_COUNT; p++)
                if (L->proj[p].data || L->proj[p].nf4.codes) be->weight_free(be, &L->proj[p]);
            for (int p = 0; p < 3; p++) be->free(be, L->bias[p]);
            be->free(be, L->q_norm);
            be->free(be, L->k_norm);
        }
        free(m->layers);
    }
    if (m->embed.data) be->weight_free(be, &m->embed);
    if (!m->lm_head_shared && m->lm_head.data) be->weight_free(be, &m->lm_head);
    be->free(be, m->final_norm);
    be->free(be, m->inv_freq);
    be->free(be, m->inv_freq_local);
    be->free(be, m->inv_freq_long);
    memset(m, 0, sizeof *m);
}
