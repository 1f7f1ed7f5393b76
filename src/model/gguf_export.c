/* gguf_export.c: a merged model as a llama.cpp GGUF file (see gguf_export.h). */
#include "model/gguf_export.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "model/gguf_vocab.h"

const char *qlt_gguf_arch_name(qlt_arch arch) {
    switch (arch) {
    case QLT_ARCH_QWEN2: return "qwen2";
    case QLT_ARCH_QWEN3: return "qwen3";
    case QLT_ARCH_LLAMA:
    case QLT_ARCH_MISTRAL: return "llama";
    case QLT_ARCH_GEMMA2: return "gemma2"; /* not exported: qlt_gguf_export refuses Gemma */
    case QLT_ARCH_GEMMA3: return "gemma3";
    case QLT_ARCH_PHI3: return "phi3"; /* not written: merge refuses GGUF for fused checkpoints */
    }
    return "llama";
}

/* Hugging Face layer-tensor suffix -> llama.cpp's. */
static const struct {
    const char *hf, *gguf;
} layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

int qlt_gguf_tensor_name(const char *hf, char *out, size_t size) {
    if (!strcmp(hf, "model.embed_tokens.weight")) return snprintf(out, size, "token_embd.weight"), 1;
    if (!strcmp(hf, "model.norm.weight")) return snprintf(out, size, "output_norm.weight"), 1;
    if (!strcmp(hf, "lm_head.weight")) return snprintf(out, size, "output.weight"), 1;
    static const char inv_freq[] = "rotary_emb.inv_freq";
    size_t n = strlen(hf), k = sizeof inv_freq - 1;
    if (n >= k && !strcmp(hf + n - k, inv_freq)) return 0; /* recomputed by llama.cpp */
    int layer, at = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &at) == 1 && at > 0 && layer >= 0) {
        for (size_t i = 0; i < sizeof layer_names / sizeof *layer_names; i++) {
            if (!strcmp(hf + at, layer_names[i].hf)) {
                snprintf(out, size, "blk.%d.%s", layer, layer_names[i].gguf);
                return 1;
            }
        }
    }
    return -1;
}

void qlt_gguf_permute_rows(void *dst, const void *src, int64_t rows, size_t row_bytes, int n_heads) {
    int64_t hd = rows / n_heads, half = hd / 2;
    QLT_ASSERT(hd * n_heads == rows && half * 2 == hd);
    for (int64_t h = 0; h < n_heads; h++)
        for (int64_t j = 0; j < half; j++)
            for (int t = 0; t < 2; t++)
                memcpy((char *)dst + (size_t)(h * hd + 2 * j + t) * row_bytes,
                       (const char *)src + (size_t)(h * hd + t * half + j) * row_bytes, row_bytes);
}

void qlt_gguf_llama3_rope_factors(const qlt_model_config *c, float *out) {
    /* float32 throughout, as the converter's torch expressions compute it */
    double low_wavelen = c->rope_original_max_pos / c->rope_low_freq_factor;
    double high_wavelen = c->rope_original_max_pos / c->rope_high_freq_factor;
    for (int i = 0; i < c->head_dim / 2; i++) {
        float expo = (float)(2 * i) / (float)c->head_dim;
        float freq = 1.0f / powf((float)c->rope_theta, expo);
        float wavelen = (float)(2.0 * M_PI) / freq;
        if (wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            out[i] = (float)c->rope_factor;
        } else {
            float smooth = ((float)c->rope_original_max_pos / wavelen - (float)c->rope_low_freq_factor) /
                           (float)(c->rope_high_freq_factor - c->rope_low_freq_factor);
            out[i] = 1.0f / ((1.0f - smooth) / (float)c->rope_factor + smooth);
        }
    }
}

static uint32_t file_type(qlt_gguf_type t) { /* llama_ftype */
    switch (t) {
    case QLT_GGUF_F32: return 0;
    case QLT_GGUF_F16: return 1;
    case QLT_GGUF_Q8_0: return 7;
    case QLT_GGUF_BF16: return 32;
    }
    return 1;
}

/* Hyper-parameters, in the converter's order. */
static int add_hparams(qlt_gguf_writer *w, const qlt_merge *m, const cJSON *cfg, qlt_gguf_type type) {
    const qlt_model_config *c = &m->cfg;
    if (c->gemma) /* llama.cpp's Gemma keys (soft-caps, window pattern, norms) are not written */
        return qlt_fail("%s: merge --format gguf does not support %s yet: merge to safetensors (the default) and "
                        "convert with llama.cpp's convert_hf_to_gguf.py", m->model_dir, c->arch_name);
    const char *arch = qlt_gguf_arch_name(c->arch);
    char key[128];
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(cfg, "max_position_embeddings");
    if (!cJSON_IsNumber(ctx) || ctx->valuedouble < 1)
        return qlt_fail("%s/config.json: 'max_position_embeddings' must be a positive integer (GGUF's context_length)",
                        m->model_dir);
    const char *base = strrchr(m->model_dir, '/');
    base = base && base[1] ? base + 1 : m->model_dir;
    qlt_gguf_add_string(w, "general.architecture", arch);
    qlt_gguf_add_string(w, "general.type", "model");
    qlt_gguf_add_string(w, "general.name", base);
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    qlt_gguf_add_u32(w, KEY("block_count"), (uint32_t)c->n_layers);
    qlt_gguf_add_u32(w, KEY("context_length"), (uint32_t)ctx->valuedouble);
    qlt_gguf_add_u32(w, KEY("embedding_length"), (uint32_t)c->hidden);
    qlt_gguf_add_u32(w, KEY("feed_forward_length"), (uint32_t)c->intermediate);
    qlt_gguf_add_u32(w, KEY("attention.head_count"), (uint32_t)c->n_heads);
    qlt_gguf_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_kv_heads);
    qlt_gguf_add_f32(w, KEY("rope.freq_base"), (float)c->rope_theta);
    qlt_gguf_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->rms_eps);
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(cfg, "head_dim"))) {
        qlt_gguf_add_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
        qlt_gguf_add_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    }
    qlt_gguf_add_u32(w, "general.file_type", file_type(type));
    if (!strcmp(arch, "llama")) {
        qlt_gguf_add_u32(w, KEY("vocab_size"), (uint32_t)c->vocab);
        qlt_gguf_add_u32(w, KEY("rope.dimension_count"), (uint32_t)c->head_dim);
    }
#undef KEY
    qlt_gguf_add_u32(w, "general.quantization_version", 2);
    return 0;
}

/* One tensor's GGUF form: its name, dims and type, and how its values are read. */
typedef struct planned {
    int index;          /* merge tensor, or -1 for rope_freqs */
    char name[128];
    int ndim;
    int64_t ne[QLT_GGUF_MAX_DIMS];
    qlt_gguf_type type;
    int permute_heads;  /* llama q / k: rows permuted over this many heads */
} planned;

static int plan_tensors(const qlt_merge *m, qlt_gguf_type type, planned **out, int *n_out) {
    const qlt_model_config *c = &m->cfg;
    int llama = !strcmp(qlt_gguf_arch_name(c->arch), "llama");
    planned *p = qlt_xcalloc((size_t)m->n_tensors + 1, sizeof *p);
    int n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const qlt_merge_tensor *x = &m->tensors[i];
        planned *t = &p[n];
        int r = qlt_gguf_tensor_name(x->name, t->name, sizeof t->name);
        if (r == 0) continue;
        if (r < 0) {
            free(p);
            return qlt_fail("%s: tensor '%s' has no llama.cpp name: a GGUF file of this model would not load (merge "
                            "to --format safetensors instead)", m->model_dir, x->name);
        }
        if (!qlt_dtype_is_float(qlt_merge_out_dtype(m, i, QLT_DTYPE_F32))) {
            free(p);
            return qlt_fail("%s: tensor '%s' is %s, not a float tensor GGUF can hold", m->model_dir, x->name,
                            qlt_dtype_name(x->src_dtype));
        }
        if (x->ndim < 1 || x->ndim > 2) {
            free(p);
            return qlt_fail("%s: tensor '%s' has %d dimensions; expected 1 or 2", m->model_dir, x->name, x->ndim);
        }
        t->index = i;
        t->ndim = x->ndim;
        for (int d = 0; d < x->ndim; d++) t->ne[d] = x->shape[x->ndim - 1 - d];
        t->type = x->ndim == 1 ? QLT_GGUF_F32 : type;
        if (t->type == QLT_GGUF_Q8_0 && t->ne[0] % QLT_GGUF_Q8_0_BLOCK != 0) t->type = QLT_GGUF_F16;
        int is_q = strstr(x->name, ".self_attn.q_proj.") != NULL, is_k = strstr(x->name, ".self_attn.k_proj.") != NULL;
        if (llama && (is_q || is_k)) t->permute_heads = is_q ? c->n_heads : c->n_kv_heads;
        n++;
    }
    if (c->rope_type == QLT_ROPE_LLAMA3) {
        planned *t = &p[n++];
        t->index = -1;
        snprintf(t->name, sizeof t->name, "rope_freqs.weight");
        t->ndim = 1;
        t->ne[0] = c->head_dim / 2;
        t->type = QLT_GGUF_F32;
    }
    *out = p;
    *n_out = n;
    return 0;
}

/* Tensor t's bytes in its GGUF type (heap, *nbytes). */
static int tensor_bytes(const qlt_merge *m, const planned *t, void **out, int64_t *nbytes) {
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->ne[d];
    *nbytes = qlt_gguf_nbytes(t->type, numel);
    if (t->index < 0) {
        float *f = qlt_xmalloc(sizeof(float) * (size_t)numel);
        qlt_gguf_llama3_rope_factors(&m->cfg, f);
        *out = f;
        return 0;
    }
    qlt_dtype dt = t->type == QLT_GGUF_F16 ? QLT_DTYPE_F16 : t->type == QLT_GGUF_BF16 ? QLT_DTYPE_BF16 : QLT_DTYPE_F32;
    size_t esize = qlt_dtype_size(dt);
    void *buf = qlt_xmalloc((size_t)numel * esize);
    if (qlt_merge_read(m, t->index, dt, buf) != 0) {
        free(buf);
        return -1;
    }
    if (t->permute_heads) {
        int64_t rows = t->ndim == 2 ? t->ne[1] : t->ne[0];
        void *tmp = qlt_xmalloc((size_t)numel * esize);
        qlt_gguf_permute_rows(tmp, buf, rows, (size_t)(numel / rows) * esize, t->permute_heads);
        free(buf);
        buf = tmp;
    }
    if (t->type == QLT_GGUF_Q8_0) {
        void *q = qlt_xmalloc((size_t)*nbytes);
        qlt_gguf_quantize_q8_0(buf, q, numel);
        free(buf);
        buf = q;
    }
    *out = buf;
    return 0;
}

int qlt_gguf_export(const qlt_merge *m, const char *path, const qlt_gguf_export_opts *o) {
    char *cfg_path = qlt_path_join(m->model_dir, "config.json"), *text = NULL;
    int rc = qlt_read_file(cfg_path, &text, NULL);
    cJSON *cfg = rc == 0 ? cJSON_Parse(text) : NULL;
    free(text);
    if (rc == 0 && !cJSON_IsObject(cfg)) rc = qlt_fail("%s: not a JSON object", cfg_path);
    free(cfg_path);
    qlt_gguf_writer w;
    qlt_gguf_writer_init(&w);
    qlt_gguf_vocab v;
    int have_vocab = 0;
    planned *plan = NULL;
    int n_plan = 0;
    if (rc == 0) rc = add_hparams(&w, m, cfg, o->type);
    if (rc == 0) rc = qlt_gguf_vocab_load(&v, o->tokenizer_json, m->model_dir, m->cfg.vocab);
    if (rc == 0) {
        have_vocab = 1;
        qlt_gguf_vocab_add(&v, &w);
        rc = plan_tensors(m, o->type, &plan, &n_plan);
    }
    for (int i = 0; i < n_plan && rc == 0; i++) rc = qlt_gguf_add_tensor(&w, plan[i].name, plan[i].ndim, plan[i].ne, plan[i].type);
    if (rc == 0) rc = qlt_gguf_begin(&w, path);
    for (int i = 0; i < n_plan && rc == 0; i++) {
        void *bytes;
        int64_t nbytes;
        rc = tensor_bytes(m, &plan[i], &bytes, &nbytes);
        if (rc == 0) {
            rc = qlt_gguf_write_data(&w, bytes, nbytes);
            free(bytes);
        }
    }
    if (rc == 0) rc = qlt_gguf_finish(&w);
    qlt_gguf_writer_free(&w);
    if (have_vocab) qlt_gguf_vocab_free(&v);
    free(plan);
    cJSON_Delete(cfg);
    return rc;
}
