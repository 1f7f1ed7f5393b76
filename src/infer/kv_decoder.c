/* kv_decoder.c: generation's forward with a KV cache (see kv_decoder.h). Per layer, for the n new tokens:
 *   xn = rmsnorm(x); q, k, v = xn W^T (+bias) (+LoRA); [q/k head norm +] rope at positions pos[i] = past + i;
 *   k and v stored into the cache rows pos[i]; attn = attention_decode(q, cache);
 *   x2 = x + attn W_o^T (+LoRA), xn = rmsnorm(x2) (one fused op); gu = xn [W_gate; W_up]^T (+LoRA);
 *   x = x2 + swiglu(gu) W_down^T (+LoRA).
 * Gemma 2 / 3: embeddings x sqrt(hidden), each layer kind's RoPE, soft-capped scores, a norm after attention and after
 * the MLP, GeGLU (as model/forward_gemma.c on the tape).
 * The last token's hidden state goes through the final norm and the lm_head (Gemma 2: then the final soft-cap). */
#include "infer/kv_decoder.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/error.h"
#include "model/gemma_model.h"

static void *alloc_or_null(qlt_backend *be, size_t bytes, int *failed, size_t *total) {
    *total += bytes;
    void *p = be->alloc(be, bytes ? bytes : 1);
    if (!p) *failed = 1;
    return p;
}

int qlt_kv_decoder_init(qlt_kv_decoder *d, const qlt_model *m, const qlt_lora *lora, int64_t max_len, int64_t max_chunk) {
    memset(d, 0, sizeof *d);
    const qlt_model_config *c = &m->cfg;
    qlt_backend *be = m->be;
    if (!be->attention_decode || !be->kv_store)
        return qlt_fail("the %s backend cannot generate (no attention over a KV cache)", be->name);
    if (max_len < 1 || max_chunk < 1) return qlt_fail("generate: a length of at least one token is needed");
    if (qlt_model_window_matters(c, (int)(max_len < INT32_MAX ? max_len : INT32_MAX)) && strcmp(be->name, "cpu") != 0)
        return qlt_fail("generate: the model's sliding_window %d is shorter than the %lld tokens to generate over: "
                        "sliding-window attention runs on the CPU path (train.device: cpu) and the GPU path does not "
                        "support it yet", c->sliding_window, (long long)max_len);
    if (max_chunk > max_len) max_chunk = max_len;
    d->m = m;
    d->lora = lora;
    d->be = be;
    d->max_len = max_len;
    d->max_chunk = max_chunk;
    const char *graph_env = qlt_env(QLT_ENV_DECODE_GRAPH);
    d->use_graph = be->capture_begin && be->capture_end && be->graph_launch && be->graph_free &&
                   !(graph_env && strcmp(graph_env, "0") == 0);
    const size_t es = qlt_dtype_size(be->act_dtype);
    const int64_t qdim = (int64_t)c->n_heads * c->head_dim, kvdim = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t widest = qdim > c->hidden ? qdim : c->hidden;
    int failed = 0;
    size_t total = 0;
    d->k_cache = qlt_xcalloc((size_t)c->n_layers, sizeof(void *));
    d->v_cache = qlt_xcalloc((size_t)c->n_layers, sizeof(void *));
    for (int l = 0; l < c->n_layers && !failed; l++) {
        d->k_cache[l] = alloc_or_null(be, es * (size_t)(max_len * kvdim), &failed, &total);
        d->v_cache[l] = alloc_or_null(be, es * (size_t)(max_len * kvdim), &failed, &total);
    }
    d->x = alloc_or_null(be, es * (size_t)(max_chunk * c->hidden), &failed, &total);
    d->x2 = alloc_or_null(be, es * (size_t)(max_chunk * c->hidden), &failed, &total);
    d->xn = alloc_or_null(be, es * (size_t)(max_chunk * widest), &failed, &total);
    d->q = alloc_or_null(be, es * (size_t)(max_chunk * qdim), &failed, &total);
    d->qn = alloc_or_null(be, es * (size_t)(max_chunk * qdim), &failed, &total);
    d->k_new = alloc_or_null(be, es * (size_t)(max_chunk * kvdim), &failed, &total);
    d->k_rot = alloc_or_null(be, es * (size_t)(max_chunk * kvdim), &failed, &total);
    d->v_new = alloc_or_null(be, es * (size_t)(max_chunk * kvdim), &failed, &total);
    d->attn = alloc_or_null(be, es * (size_t)(max_chunk * qdim), &failed, &total);
    d->o = alloc_or_null(be, es * (size_t)(max_chunk * c->hidden), &failed, &total);
    d->down = alloc_or_null(be, es * (size_t)(max_chunk * c->hidden), &failed, &total);
    d->gu = alloc_or_null(be, es * (size_t)(max_chunk * 2 * (int64_t)c->intermediate), &failed, &total);
    d->act = alloc_or_null(be, es * (size_t)(max_chunk * (int64_t)c->intermediate), &failed, &total);
    d->rstd = alloc_or_null(be, sizeof(float) * (size_t)(max_chunk * (c->n_heads > 1 ? c->n_heads : 1)), &failed,
                            &total);
    d->u = alloc_or_null(be, sizeof(float) * (size_t)(max_chunk * 3 * (lora ? lora->r : 1)), &failed, &total);
    d->logits = alloc_or_null(be, sizeof(float) * (size_t)c->vocab, &failed, &total);
    d->ids = alloc_or_null(be, sizeof(int32_t) * (size_t)max_chunk, &failed, &total);
    d->pos = alloc_or_null(be, sizeof(int32_t) * (size_t)max_chunk, &failed, &total);
    if (failed) {
        qlt_kv_decoder_free(d);
        return qlt_fail("generate: out of %s memory for a KV cache of %lld tokens (%.2f GiB with the work buffers): "
                        "use a shorter prompt or --max-new-tokens", be->name, (long long)max_len,
                        (double)total / 1073741824.0);
    }
    return 0;
}

void qlt_kv_decoder_reset(qlt_kv_decoder *d) { d->past = 0; }

void qlt_kv_decoder_free(qlt_kv_decoder *d) {
    if (!d->be) return;
    qlt_backend *be = d->be;
    const int layers = d->m->cfg.n_layers;
    if (d->step_graph) be->graph_free(be, d->step_graph);
    for (int l = 0; l < layers; l++) {
        if (d->k_cache && d->k_cache[l]) be->free(be, d->k_cache[l]);
        if (d->v_cache && d->v_cache[l]) be->free(be, d->v_cache[l]);
    }
    free(d->k_cache);
    free(d->v_cache);
    void *bufs[] = {d->x, d->x2, d->xn, d->q, d->qn, d->k_new, d->k_rot, d->v_new, d->attn, d->o, d->down, d->gu, d->act,
                    d->rstd, d->u, d->logits, d->ids, d->pos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(be, bufs[i]);
    memset(d, 0, sizeof *d);
}

/* The site of layer l's projection p writing into y (row stride ld), or 0 when p carries no adapter. */
static int lora_site(const qlt_kv_decoder *d, int l, qlt_proj p, void *y, int64_t ld, qlt_lora_site *site) {
    const qlt_lora *lora = d->lora;
    if (!lora || !lora->slots[l][p].active) return 0;
    const qlt_lora_slot *s = &lora->slots[l][p];
    memset(site, 0, sizeof *site);
    site->y = y;
    site->ld = ld;
    site->out = s->out;
    site->a = lora->params + s->offset_a;
    site->b = lora->params + qlt_lora_offset_b(lora, s);
    return 1;
}

/* y_i += scale u_i B_i^T for the adapters among the k projections first.. of layer l that read x [n, in] (x A^T
 * once for all of them). */
static void add_adapters(qlt_kv_decoder *d, int l, qlt_proj first, int k, void *const *ys, const int64_t *lds,
                         const void *x, int64_t n, int64_t in) {
    qlt_lora_site sites[3];
    int count = 0;
    for (int j = 0; j < k; j++) count += lora_site(d, l, (qlt_proj)(first + j), ys[j], lds[j], &sites[count]);
    if (count == 0) return;
    d->be->lora_fwd(d->be, sites, count, d->u, x, n, in, d->lora->r, d->lora->scale);
}

/* One chunk of n <= max_chunk tokens at the positions d->pos holds through every layer; leaves the hidden states in
 * d->x [n, hidden]. Reads nothing from the host, so it can be captured. */
static void forward_chunk(qlt_kv_decoder *d, int64_t n) {
    const qlt_model *m = d->m;
    const qlt_model_config *c = &m->cfg;
    qlt_backend *be = d->be;
    const size_t es = qlt_dtype_size(be->act_dtype);
    const int64_t qdim = (int64_t)c->n_heads * c->head_dim, kvdim = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t inter = c->intermediate;
    const float scale = qlt_model_attn_scale(c);
    be->embed(be, d->x, d->ids, &m->embed, n);
    if (c->gemma) be->scale_inplace(be, d->x, n * c->hidden, qlt_gemma_embed_scale(c, be->act_dtype));
    for (int l = 0; l < c->n_layers; l++) {
        const qlt_layer *L = &m->layers[l];
        const float *inv_freq = qlt_model_layer_local_rope(c, l) ? m->inv_freq_local : m->inv_freq; /* Gemma's two */
        be->rmsnorm_fwd(be, d->xn, d->rstd, d->x, L->attn_norm, n, c->hidden, c->rms_eps);
        void *qkv_out[3] = {d->q, d->k_new, d->v_new};
        const int64_t qkv_ld[3] = {qdim, kvdim, kvdim};
        for (int j = 0; j < 3; j++) {
            const qlt_weight *w = &L->proj[QLT_PROJ_Q + j];
            be->linear_fwd(be, qkv_out[j], d->xn, &w, 1, L->bias[j], n);
        }
        add_adapters(d, l, QLT_PROJ_Q, 3, qkv_out, qkv_ld, d->xn, n, c->hidden);
        const void *q_final = d->q, *k_final = d->k_new;
        if (c->qk_norm) {
            be->head_norm_rope_fwd(be, d->qn, d->rstd, d->q, L->q_norm, d->pos, inv_freq, n, c->n_heads, c->head_dim,
                                   c->rms_eps);
            be->head_norm_rope_fwd(be, d->k_rot, d->rstd, d->k_new, L->k_norm, d->pos, inv_freq, n, c->n_kv_heads,
                                   c->head_dim, c->rms_eps);
            q_final = d->qn;
            k_final = d->k_rot;
        } else if (qlt_model_rope_scaled(c)) { /* Phi-3: partial rotary, LongRoPE by the chunk's last position */
            const float *inv_freq = qlt_model_inv_freq(m, (int)(d->past + n - 1));
            const int rd = qlt_model_rotary_dim(c);
            const float af = c->rope_attn_factor ? c->rope_attn_factor : 1.0f;
            be->rope_scaled(be, d->q, d->pos, inv_freq, n, c->n_heads, c->head_dim, rd, af, 0);
            be->rope_scaled(be, d->k_new, d->pos, inv_freq, n, c->n_kv_heads, c->head_dim, rd, af, 0);
        } else {
            be->rope(be, d->q, d->pos, inv_freq, n, c->n_heads, c->head_dim, 0);
            be->rope(be, d->k_new, d->pos, inv_freq, n, c->n_kv_heads, c->head_dim, 0);
        }
        be->kv_store(be, d->k_cache[l], d->v_cache[l], k_final, d->v_new, d->pos, n, kvdim);
        /* the launch sized for the whole cache, the same in every step: eager and replayed steps add alike */
        if (c->attn_softcap > 0)
            be->attention_decode_softcap(be, d->attn, q_final, d->k_cache[l], d->v_cache[l], d->pos, d->max_len, n,
                                         c->n_heads, c->n_kv_heads, c->head_dim, scale, qlt_model_layer_window(c, l),
                                         c->attn_softcap);
        else
            be->attention_decode(be, d->attn, q_final, d->k_cache[l], d->v_cache[l], d->pos, d->max_len, n,
                                 c->n_heads, c->n_kv_heads, c->head_dim, scale, qlt_model_layer_window(c, l));
        const qlt_weight *wo = &L->proj[QLT_PROJ_O];
        be->linear_fwd(be, d->o, d->attn, &wo, 1, NULL, n);
        void *o_out[1] = {d->o};
        const int64_t o_ld[1] = {c->hidden};
        add_adapters(d, l, QLT_PROJ_O, 1, o_out, o_ld, d->attn, n, qdim);
        const void *attn_out = d->o;
        if (c->gemma) { /* Gemma's norm after attention, into down (free until the MLP) */
            be->rmsnorm_fwd(be, d->down, d->rstd, d->o, L->post_attn_norm, n, c->hidden, c->rms_eps);
            attn_out = d->down;
        }
        be->add_rmsnorm_fwd(be, d->x2, d->xn, d->rstd, d->x, attn_out, L->mlp_norm, n, c->hidden, c->rms_eps);
        const qlt_weight *wgu[2] = {&L->proj[QLT_PROJ_GATE], &L->proj[QLT_PROJ_UP]};
        be->linear_fwd(be, d->gu, d->xn, wgu, 2, NULL, n);
        void *gu_out[2] = {d->gu, (char *)d->gu + es * (size_t)inter};
        const int64_t gu_ld[2] = {2 * inter, 2 * inter};
        add_adapters(d, l, QLT_PROJ_GATE, 2, gu_out, gu_ld, d->xn, n, c->hidden);
        if (c->gemma) be->geglu_fwd(be, d->act, d->gu, n, inter);
        else be->swiglu_fwd(be, d->act, d->gu, n, inter);
        const qlt_weight *wd = &L->proj[QLT_PROJ_DOWN];
        be->linear_fwd(be, d->down, d->act, &wd, 1, NULL, n);
        void *down_out[1] = {d->down};
        const int64_t down_ld[1] = {c->hidden};
        add_adapters(d, l, QLT_PROJ_DOWN, 1, down_out, down_ld, d->act, n, inter);
        const void *mlp_out = d->down;
        if (c->gemma) { /* Gemma's norm after the MLP, into o (free by now) */
            be->rmsnorm_fwd(be, d->o, d->rstd, d->down, L->post_mlp_norm, n, c->hidden, c->rms_eps);
            mlp_out = d->o;
        }
        be->add(be, d->x, d->x2, mlp_out, n * c->hidden);
    }
}

/* logits of row i of d->x into d->logits [vocab] (backend memory) */
static void row_logits_device(qlt_kv_decoder *d, int64_t i) {
    const qlt_model *m = d->m;
    qlt_backend *be = d->be;
    const int64_t hidden = m->cfg.hidden;
    const void *row = (const char *)d->x + qlt_dtype_size(be->act_dtype) * (size_t)(i * hidden);
    be->rmsnorm_fwd(be, d->xn, d->rstd, row, m->final_norm, 1, hidden, m->cfg.rms_eps);
    qlt_model_logits(m, d->logits, d->xn, 1); /* Gemma 2: the final soft-cap */
}

/* logits of row i of d->x into host out [vocab] */
static void row_logits(qlt_kv_decoder *d, int64_t i, float *out) {
    row_logits_device(d, i);
    d->be->download(d->be, out, d->logits, sizeof(float) * (size_t)d->m->cfg.vocab);
}

/* One token through the captured step (captured on first use); 0, or -1 when the backend cannot capture it (the
 * caller then runs the step eagerly). d->ids and d->pos hold the token and its position. */
static int graph_token(qlt_kv_decoder *d, float *logits_last) {
    qlt_backend *be = d->be;
    if (!d->step_graph) {
        if (be->capture_begin(be) != 0) return -1;
        forward_chunk(d, 1);
        row_logits_device(d, 0);
        if (be->capture_end(be, &d->step_graph) != 0) {
            d->step_graph = NULL;
            return -1;
        }
    }
    if (be->graph_launch(be, d->step_graph) != 0) return -1;
    if (logits_last) be->download(be, logits_last, d->logits, sizeof(float) * (size_t)d->m->cfg.vocab);
    return 0;
}

int qlt_kv_decoder_step(qlt_kv_decoder *d, const int32_t *ids, int64_t n, float *logits_last, float *logits_all) {
    const int32_t vocab = d->m->cfg.vocab;
    if (n < 1) return qlt_fail("generate: a step needs at least one token");
    if (d->past + n > d->max_len)
        return qlt_fail("generate: %lld tokens exceed the KV cache of %lld (prompt + --max-new-tokens)",
                        (long long)(d->past + n), (long long)d->max_len);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return qlt_fail("generate: token id %d is outside the model's vocabulary of %d", ids[i], vocab);
    int32_t *pos = qlt_xmalloc(sizeof(int32_t) * (size_t)d->max_chunk);
    for (int64_t start = 0; start < n; start += d->max_chunk) {
        const int64_t cn = n - start < d->max_chunk ? n - start : d->max_chunk;
        for (int64_t i = 0; i < cn; i++) pos[i] = (int32_t)(d->past + i);
        d->be->upload(d->be, d->ids, ids + start, sizeof(int32_t) * (size_t)cn);
        d->be->upload(d->be, d->pos, pos, sizeof(int32_t) * (size_t)cn);
        if (cn == 1 && !logits_all && d->use_graph && graph_token(d, logits_last) == 0) {
            d->past += 1;
            continue;
        }
        forward_chunk(d, cn);
        d->past += cn;
        if (logits_all)
            for (int64_t i = 0; i < cn; i++) row_logits(d, i, logits_all + (size_t)(start + i) * (size_t)vocab);
        else if (logits_last && start + cn == n)
            row_logits(d, cn - 1, logits_last);
    }
    free(pos);
    return 0;
}
