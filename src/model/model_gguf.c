/* model_gguf.c: loads a llama.cpp GGUF file as the Hugging Face model it was converted from (see model.h).
 *
 * GGUF names map onto the Hugging Face layout:
 *   token_embd -> model.embed_tokens, output_norm -> model.norm, output -> lm_head (absent: tied),
 *   blk.N.attn_norm / ffn_norm -> input_layernorm / post_attention_layernorm,
 *   blk.N.attn_q / attn_k / attn_v / attn_output -> self_attn.q/k/v/o_proj (+ .bias),
 *   blk.N.ffn_gate / ffn_up / ffn_down -> mlp.gate/up/down_proj, blk.N.attn_q_norm / attn_k_norm -> q/k_norm.
 * A GGUF matrix has dims {cols, rows} (innermost first): its bytes are the Hugging Face [rows, cols] array.
 * llama.cpp's converter reorders the rows of Llama-family attn_q and attn_k (and their biases) inside each
 * head, from Hugging Face's rotate-half pairing (i, i + d/2) to interleaved pairs (2i, 2i + 1):
 *   GGUF row  h*d + 2j + k  =  Hugging Face row  h*d + k*d/2 + j   (k in {0, 1}, j < d/2, d = head_dim)
 * which is undone here, so the model equals the Hugging Face one. Qwen2/Qwen3 files are not reordered.
 * Each tensor is dequantized to float32 on the host one at a time (F32/F16/BF16 go through as they are),
 * then handed to the backend's weight_create like a safetensors tensor (NF4 or dense). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "model/model.h"

typedef struct gguf_loader {
    qlt_model *m;
    const qlt_gguf *g;
    int blocksize, double_quant;
} gguf_loader;

static const char *const gguf_proj[QLT_PROJ_COUNT] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                                      "ffn_gate", "ffn_up", "ffn_down"};

/* Llama-family files store q and k rows in llama.cpp's interleaved order. */
static int is_permuted_arch(qlt_arch a) { return a == QLT_ARCH_LLAMA || a == QLT_ARCH_MISTRAL; }

/* The tensor, checked for presence and shape (rows outermost; rows == 0 for a vector). */
static int find(const gguf_loader *L, const char *name, int64_t rows, int64_t cols, const qlt_gguf_tensor **out) {
    const qlt_gguf_tensor *t = qlt_gguf_find_tensor(L->g, name);
    if (!t) return qlt_fail("%s: tensor '%s' is missing (not a complete %s model?)", L->g->path, name, L->m->cfg.arch_name);
    int ok = rows ? t->ndim == 2 && t->ne[0] == cols && t->ne[1] == rows : t->ndim == 1 && t->ne[0] == cols;
    if (!ok) {
        char got[96];
        qlt_gguf_format_shape(got, sizeof got, t);
        if (rows)
            return qlt_fail("%s: tensor '%s' has shape [%s]; the metadata implies [%lld, %lld]", L->g->path, name, got,
                            (long long)rows, (long long)cols);
        return qlt_fail("%s: tensor '%s' has shape [%s]; the metadata implies [%lld]", L->g->path, name, got,
                        (long long)cols);
    }
    *out = t;
    return 0;
}

/* dst row r (Hugging Face order) = src row of llama.cpp's order, rows of row_bytes, n_rows a multiple of
 * head_dim. */
static void unpermute_rows(void *dst, const void *src, int64_t n_rows, int head_dim, size_t row_bytes) {
    const int half = head_dim / 2;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t head = r / head_dim, within = r % head_dim;
        int64_t from = head * head_dim + 2 * (within % half) + within / half;
        memcpy((char *)dst + (size_t)r * row_bytes, (const char *)src + (size_t)from * row_bytes, row_bytes);
    }
}

/* A float vector [n] (norm weight, bias) uploaded as float32; permute: q/k bias rows of a Llama file. */
static int load_vector(const gguf_loader *L, const char *name, int64_t n, int permute, float **out) {
    const qlt_gguf_tensor *t;
    QLT_TRY(find(L, name, 0, n, &t));
    float *host = qlt_xmalloc(sizeof(float) * (size_t)n);
    if (qlt_gguf_tensor_to_f32(L->g, t, host) != 0) {
        free(host);
        return -1;
    }
    if (permute) {
        float *tmp = qlt_xmalloc(sizeof(float) * (size_t)n);
        unpermute_rows(tmp, host, n, L->m->cfg.head_dim, sizeof(float));
        free(host);
        host = tmp;
    }
    qlt_backend *be = L->m->be;
    *out = be->alloc(be, sizeof(float) * (size_t)n);
    if (*out) be->upload(be, *out, host, sizeof(float) * (size_t)n);
    free(host);
    if (!*out) return qlt_fail("out of %s memory loading '%s'", be->name, name);
    return 0;
}

/* A matrix [rows, cols] onto the backend as weight_create makes it (NF4 with blocksize > 0, else dense).
 * F32 / F16 / BF16 data goes through in its own type (as a safetensors tensor would); other types are
 * dequantized to float32 first. permute: undo llama.cpp's q/k row order. */
static int load_matrix(const gguf_loader *L, const char *name, int64_t rows, int64_t cols, int permute, int blocksize,
                       qlt_weight *w) {
    const qlt_gguf_tensor *t;
    QLT_TRY(find(L, name, rows, cols, &t));
    qlt_dtype dtype = QLT_DTYPE_F32;
    const void *data = t->data;
    void *owned = NULL;
    if (t->type == QLT_GGML_F16 || t->type == QLT_GGML_BF16) {
        dtype = t->type == QLT_GGML_F16 ? QLT_DTYPE_F16 : QLT_DTYPE_BF16;
    } else if (t->type != QLT_GGML_F32) {
        owned = qlt_xmalloc(sizeof(float) * (size_t)t->numel);
        if (qlt_gguf_tensor_to_f32(L->g, t, owned) != 0) {
            free(owned);
            return -1;
        }
        data = owned;
    }
    if (permute) {
        size_t row_bytes = qlt_dtype_size(dtype) * (size_t)cols;
        void *tmp = qlt_xmalloc(row_bytes * (size_t)rows);
        unpermute_rows(tmp, data, rows, L->m->cfg.head_dim, row_bytes);
        free(owned);
        data = owned = tmp;
    }
    qlt_backend *be = L->m->be;
    int rc = be->weight_create(be, w, data, dtype, rows, cols, blocksize, L->double_quant);
    free(owned);
    if (rc != 0) return qlt_fail_context("%s: tensor '%s'", L->g->path, name);
    return 0;
}

static int load_layer(const gguf_loader *L, int l) {
    const qlt_model_config *c = &L->m->cfg;
    qlt_layer *layer = &L->m->layers[l];
    const int permuted = is_permuted_arch(c->arch);
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
    QLT_TRY(load_vector(L, name, c->hidden, 0, &layer->attn_norm));
    snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
    QLT_TRY(load_vector(L, name, c->hidden, 0, &layer->mlp_norm));
    for (int p = 0; p < QLT_PROJ_COUNT; p++) {
        int64_t rows, cols;
        qlt_model_proj_shape(c, p, &rows, &cols);
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, gguf_proj[p]);
        int permute = permuted && (p == QLT_PROJ_Q || p == QLT_PROJ_K);
        QLT_TRY(load_matrix(L, name, rows, cols, permute, L->blocksize, &layer->proj[p]));
    }
    if (c->attention_bias) {
        for (int p = 0; p < 3; p++) {
            snprintf(name, sizeof name, "blk.%d.%s.bias", l, gguf_proj[p]);
            int permute = permuted && (p == QLT_PROJ_Q || p == QLT_PROJ_K);
            QLT_TRY(load_vector(L, name, layer->proj[p].rows, permute, &layer->bias[p]));
        }
    }
    if (c->qk_norm) {
        snprintf(name, sizeof name, "blk.%d.attn_q_norm.weight", l);
        QLT_TRY(load_vector(L, name, c->head_dim, 0, &layer->q_norm));
        snprintf(name, sizeof name, "blk.%d.attn_k_norm.weight", l);
        QLT_TRY(load_vector(L, name, c->head_dim, 0, &layer->k_norm));
    }
    return 0;
}

int qlt_model_load_gguf(qlt_model *m, qlt_backend *be, const char *path, const qlt_model_load_opts *opts) {
    memset(m, 0, sizeof *m);
    m->be = be;
    qlt_gguf g;
    QLT_TRY(qlt_gguf_open(&g, path));
    gguf_loader L = {m, &g, opts && opts->nf4 ? opts->nf4_blocksize : 0, opts ? opts->double_quant : 0};
    m->quantized = L.blocksize > 0;
    int rc = -1;
    if (qlt_model_config_from_gguf(&m->cfg, &g) != 0) goto done;
    const qlt_model_config *c = &m->cfg;
    if (load_matrix(&L, "token_embd.weight", c->vocab, c->hidden, 0, 0, &m->embed)) goto done;
    if (load_vector(&L, "output_norm.weight", c->hidden, 0, &m->final_norm)) goto done;
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
        m->lm_head_shared = 1;
    } else if (load_matrix(&L, "output.weight", c->vocab, c->hidden, 0, 0, &m->lm_head)) {
        goto done;
    }
    /* the layer table is sized by block_count: the last block must exist before it is allocated */
    char last[64];
    snprintf(last, sizeof last, "blk.%d.attn_norm.weight", c->n_layers - 1);
    if (!qlt_gguf_find_tensor(&g, last)) {
        qlt_fail("%s: block_count is %d but tensor %s is missing", path, c->n_layers, last);
        goto done;
    }
    m->layers = qlt_xcalloc((size_t)c->n_layers, sizeof *m->layers);
    for (int l = 0; l < c->n_layers; l++)
        if (load_layer(&L, l)) goto done;
    rc = qlt_model_finish(m);
done:
    qlt_gguf_close(&g);
    if (rc != 0) qlt_model_free(m);
    return rc;
}
