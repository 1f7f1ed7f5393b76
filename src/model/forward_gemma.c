/* forward_gemma.c: Gemma 2 / 3's decoder layer on the tape (see gemma_model.h), beside the other families' in
 * forward.c: a norm before and after both attention and the MLP (the (1 + w) of Gemma's RMSNorm is folded into
 * the loaded weights, so the plain RMSNorm ops run them), q/k norms (Gemma 3), each layer kind's own RoPE, the
 * attention scale query_pre_attn_scalar ** -0.5 with Gemma 2's soft-capped scores, and GeGLU:
 *   x = rmsnorm(h) -> q, k, v (+LoRA) -> [q/k norm] + rope (sliding or full layer's) -> attention (window,
 *   soft-cap) -> o (+LoRA) -> rmsnorm -> h += (fused with the pre-MLP rmsnorm) -> [gate|up] (+LoRA) -> geglu ->
 *   down (+LoRA) -> rmsnorm -> h += */
#include "common/error.h"
#include "model/gemma_model.h"

int qlt_gemma_layer_forward(qlt_graph *g, const qlt_model *m, const qlt_batch_dev *b, int l, int h,
                            const qlt_lora_ref *const *lora) {
    const qlt_model_config *c = &m->cfg;
    const qlt_layer *L = &m->layers[l];
    const int64_t n = (int64_t)b->batch * b->seq;
    const float *inv_freq = qlt_model_layer_local_rope(c, l) ? m->inv_freq_local : m->inv_freq; /* [head_dim/2] */
    int xn = qlt_ag_rmsnorm(g, h, L->attn_norm, n, c->hidden, c->rms_eps); /* [n, hidden] */
    const qlt_proj_group *gqkv = &qlt_proj_groups[QLT_GROUP_QKV];
    const qlt_weight *qkv_w[3];
    const float *qkv_bias[3];
    for (int j = 0; j < gqkv->count; j++) {
        qkv_w[j] = &L->proj[gqkv->first + j];
        qkv_bias[j] = L->bias[gqkv->first + j];
    }
    int qkv[3]; /* q [n, n_heads * head_dim], k / v [n, n_kv_heads * head_dim] */
    qlt_ag_linear_group(g, xn, gqkv->count, qkv_w, qkv_bias, &lora[gqkv->first], 0, n, qkv);
    int q = qkv[0], k = qkv[1], v = qkv[2];
    if (c->qk_norm) {
        q = qlt_ag_head_norm_rope(g, q, L->q_norm, b->positions, inv_freq, n, c->n_heads, c->head_dim, c->rms_eps);
        k = qlt_ag_head_norm_rope(g, k, L->k_norm, b->positions, inv_freq, n, c->n_kv_heads, c->head_dim, c->rms_eps);
    } else {
        q = qlt_ag_rope(g, q, b->positions, inv_freq, n, c->n_heads, c->head_dim);
        k = qlt_ag_rope(g, k, b->positions, inv_freq, n, c->n_kv_heads, c->head_dim);
    }
    const int window = qlt_model_layer_window(c, l);
    QLT_ASSERT(window == 0 || window == b->window); /* the batch was staged for this model's window */
    int a = qlt_ag_attention_softcap(g, q, k, v, window ? b->seg_window : b->seg_start, b->batch, b->seq, c->n_heads,
                                     c->n_kv_heads, c->head_dim, qlt_model_attn_scale(c), c->attn_softcap);
    const int po = qlt_proj_groups[QLT_GROUP_O].first;
    int o = qlt_ag_linear(g, a, &L->proj[po], NULL, lora[po], n);           /* [n, hidden] */
    int on = qlt_ag_rmsnorm(g, o, L->post_attn_norm, n, c->hidden, c->rms_eps);
    int xm = qlt_ag_add_rmsnorm(g, h, on, L->mlp_norm, n, c->hidden, c->rms_eps, &h);
    const qlt_proj_group *ggu = &qlt_proj_groups[QLT_GROUP_GATE_UP];
    const qlt_weight *gu_w[2];
    for (int j = 0; j < ggu->count; j++) gu_w[j] = &L->proj[ggu->first + j];
    int gu; /* [n, 2 * intermediate] */
    qlt_ag_linear_group(g, xm, ggu->count, gu_w, NULL, &lora[ggu->first], 1, n, &gu);
    int act = qlt_ag_geglu(g, gu, n, c->intermediate); /* [n, intermediate] */
    const int pd = qlt_proj_groups[QLT_GROUP_DOWN].first;
    int down = qlt_ag_linear(g, act, &L->proj[pd], NULL, lora[pd], n);
    int dn = qlt_ag_rmsnorm(g, down, L->post_mlp_norm, n, c->hidden, c->rms_eps);
    return qlt_ag_add(g, h, dn);
}
