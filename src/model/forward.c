/* forward.c: the decoder forward on the tape (see forward.h):
 * embed -> L x (rmsnorm -> q,k,v (+bias, +LoRA) -> [q/k norm] + rope -> attention -> o (+LoRA) -> add
 *              + rmsnorm -> [gate|up] (+LoRA) -> swiglu -> down (+LoRA) -> add) -> rmsnorm -> lm_head+CE */
#include "model/forward.h"

#include "common/error.h"
#include "model/gemma_model.h"

size_t qlt_loss_scratch_bytes(const qlt_model *m, int64_t n) {
    return m->be->loss_scratch_bytes(m->be, n, m->cfg.vocab);
}

static const qlt_lora_ref *lora_ref(const qlt_forward_opts *o, int layer, qlt_proj p, qlt_lora_ref *ref) {
    const qlt_lora *l = o->lora;
    if (!l || !l->slots[layer][p].active) return NULL;
    const qlt_lora_slot *s = &l->slots[layer][p];
    ref->a = l->params + s->offset_a;
    ref->b = l->params + qlt_lora_offset_b(l, s);
    ref->da = l->grads + s->offset_a;
    ref->db = l->grads + qlt_lora_offset_b(l, s);
    ref->r = l->r;
    ref->scale = l->scale;
    ref->dropout = o->train ? l->dropout : 0.0f;
    ref->dropout_seed = o->dropout_seed;
    /* a fused module (Phi-3's qkv_proj) is one adapter: its projections share A and so one dropout mask */
    ref->dropout_salt = (uint64_t)(layer * QLT_PROJ_COUNT + s->module_first);
    return ref;
}

/* One decoder layer on the tape: h [N, hidden] -> h + attn(...) + mlp(...). Returns the output value.
 * q/k/v share one LoRA group (x.A^T once); gate and up are one stacked GEMM writing [N, 2I], read by
 * SwiGLU as it is; the attention residual add is fused with the MLP's RMSNorm. */
static int layer_forward(qlt_graph *g, const qlt_model *m, const qlt_batch_dev *b, const qlt_forward_opts *opts, int l,
                         int h) {
    const qlt_model_config *c = &m->cfg;
    const qlt_layer *L = &m->layers[l];
    int64_t n = (int64_t)b->batch * b->seq;
    float attn_scale = qlt_model_attn_scale(c);
    qlt_lora_ref refs[QLT_PROJ_COUNT];
    const qlt_lora_ref *lr[QLT_PROJ_COUNT];
    for (int p = 0; p < QLT_PROJ_COUNT; p++) lr[p] = lora_ref(opts, l, (qlt_proj)p, &refs[p]);
    if (c->gemma) return qlt_gemma_layer_forward(g, m, b, l, h, lr); /* forward_gemma.c */
    int xn = qlt_ag_rmsnorm(g, h, L->attn_norm, n, c->hidden, c->rms_eps);
    const qlt_proj_group *gqkv = &qlt_proj_groups[QLT_GROUP_QKV];
    const qlt_weight *qkv_w[3];
    const float *qkv_bias[3];
    for (int j = 0; j < gqkv->count; j++) {
        qkv_w[j] = &L->proj[gqkv->first + j];
        qkv_bias[j] = L->bias[gqkv->first + j];
    }
    int qkv[3];
    qlt_ag_linear_group(g, xn, gqkv->count, qkv_w, qkv_bias, &lr[gqkv->first], 0, n, qkv);
    int q = qkv[0], k = qkv[1], v = qkv[2];
    if (c->qk_norm) {
        q = qlt_ag_head_norm_rope(g, q, L->q_norm, b->positions, m->inv_freq, n, c->n_heads, c->head_dim, c->rms_eps);
        k = qlt_ag_head_norm_rope(g, k, L->k_norm, b->positions, m->inv_freq, n, c->n_kv_heads, c->head_dim,
                                  c->rms_eps);
    } else {
        const float *inv_freq = qlt_model_inv_freq(m, b->max_position); /* LongRoPE: short or long */
        const int rd = qlt_model_rotary_dim(c);
        const float af = c->rope_attn_factor ? c->rope_attn_factor : 1.0f;
        q = qlt_ag_rope_scaled(g, q, b->positions, inv_freq, n, c->n_heads, c->head_dim, rd, af);
        k = qlt_ag_rope_scaled(g, k, b->positions, inv_freq, n, c->n_kv_heads, c->head_dim, rd, af);
    }
    /* a sliding-window layer masks by seg_window: same example, causal, and t - j < window */
    const int window = qlt_model_layer_window(c, l);
    QLT_ASSERT(window == 0 || window == b->window); /* the batch was staged for this model's window */
    int a = qlt_ag_attention(g, q, k, v, window ? b->seg_window : b->seg_start, b->batch, b->seq, c->n_heads,
                             c->n_kv_heads, c->head_dim, attn_scale);
    int o = qlt_ag_linear(g, a, &L->proj[qlt_proj_groups[QLT_GROUP_O].first], NULL,
                          lr[qlt_proj_groups[QLT_GROUP_O].first], n);
    int xm = qlt_ag_add_rmsnorm(g, h, o, L->mlp_norm, n, c->hidden, c->rms_eps, &h);
    const qlt_proj_group *ggu = &qlt_proj_groups[QLT_GROUP_GATE_UP];
    const qlt_weight *gu_w[2];
    for (int j = 0; j < ggu->count; j++) gu_w[j] = &L->proj[ggu->first + j];
    int gu;
    qlt_ag_linear_group(g, xm, ggu->count, gu_w, NULL, &lr[ggu->first], 1, n, &gu);
    int act = qlt_ag_swiglu(g, gu, n, c->intermediate);
    int down = qlt_ag_linear(g, act, &L->proj[qlt_proj_groups[QLT_GROUP_DOWN].first], NULL,
                             lr[qlt_proj_groups[QLT_GROUP_DOWN].first], n);
    return qlt_ag_add(g, h, down);
}

/* Layer l on the recompute graph, reading the main graph's value h (its storage, not a copy). */
static int layer_on_recompute(qlt_graph *main, const qlt_model *m, const qlt_batch_dev *b,
                              const qlt_forward_opts *opts, int l, int h, int *sub_in) {
    qlt_graph *sub = opts->recompute;
    qlt_graph_begin(sub, main->planning);
    *sub_in = qlt_graph_value(sub, main->values[h].data, main->values[h].count, main->values[h].needs_grad);
    return layer_forward(sub, m, b, opts, l, *sub_in);
}

/* Backward of a checkpointed layer: recompute its forward on the recompute graph, hand it the output
 * gradient, run its backward, which writes the input gradient straight into the main graph's buffer. */
static void checkpoint_backward(qlt_graph *g, const qlt_node *node) {
    const qlt_model *m = node->u.custom.ctx[0];
    const qlt_batch_dev *b = node->u.custom.ctx[1];
    const qlt_forward_opts *opts = node->u.custom.ctx[2];
    void *const *grad_buffers = node->u.custom.ctx[3];
    int l = node->u.custom.arg, h = node->in[0];
    qlt_graph *sub = opts->recompute;
    qlt_graph_touch(g, g->values[h].data); /* read by the recomputation */
    qlt_graph_touch(g, g->values[node->out].grad);
    qlt_graph_touch(g, grad_buffers[l % 2]);
    int in, out = layer_on_recompute(g, m, b, opts, l, h, &in);
    sub->values[out].grad = g->values[node->out].grad;
    sub->values[out].grad_ready = 1;
    if (g->values[h].needs_grad) {
        QLT_ASSERT(!g->values[h].grad_ready); /* a checkpointed layer's input has no other consumer */
        g->values[h].grad = grad_buffers[l % 2]; /* two buffers take turns: layer l+1's is dead by now */
        sub->values[in].grad = g->values[h].grad;
    }
    qlt_graph_backward(sub);
    if (g->values[h].needs_grad) g->values[h].grad_ready = 1;
}

int qlt_forward(qlt_graph *g, const qlt_model *m, const qlt_batch_dev *b, const qlt_forward_opts *opts) {
    const qlt_model_config *c = &m->cfg;
    qlt_backend *be = g->be;
    int64_t n = (int64_t)b->batch * b->seq;
    int h = qlt_graph_value(g, NULL, n * c->hidden, 0);
    qlt_graph_tick(g);
    qlt_graph_touch(g, g->values[h].data);
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (!g->planning) be->embed(be, g->values[h].data, b->input_ids, &m->embed, n);
    if (!g->planning && c->gemma) /* Gemma: embeddings x sqrt(hidden) */
        be->scale_inplace(be, g->values[h].data, n * c->hidden, qlt_gemma_embed_scale(c, be->act_dtype));
    if (!opts->recompute) {
        for (int l = 0; l < c->n_layers; l++) h = layer_forward(g, m, b, opts, l, h);
    } else {
        /* the main tape keeps only each layer's input; two gradient buffers serve every layer */
        size_t hidden_bytes = (size_t)(n * c->hidden) * qlt_dtype_size(be->act_dtype);
        g->ckpt_grads[0] = qlt_graph_alloc(g, hidden_bytes);
        g->ckpt_grads[1] = qlt_graph_alloc(g, hidden_bytes);
        for (int l = 0; l < c->n_layers; l++) {
            int in;
            int sub_out = layer_on_recompute(g, m, b, opts, l, h, &in);
            int out = qlt_graph_value(g, NULL, n * c->hidden, g->values[h].needs_grad || opts->lora != NULL);
            qlt_graph_tick(g);
            qlt_graph_touch(g, g->values[out].data);
            qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
            if (!g->planning) be->copy(be, g->values[out].data, opts->recompute->values[sub_out].data, n * c->hidden);
            qlt_ag_custom(g, h, out, checkpoint_backward, m, b, opts, g->ckpt_grads, l);
            h = out;
        }
    }
    int hf = qlt_ag_rmsnorm(g, h, m->final_norm, n, c->hidden, c->rms_eps);
    if (opts->scalars) {
        void *dx = NULL;
        if (opts->train && g->values[hf].needs_grad) {
            dx = qlt_graph_grad(g, hf);
            g->values[hf].grad_ready = 1;
        }
        qlt_graph_tick(g);
        qlt_graph_touch(g, g->values[hf].data);
        qlt_graph_touch(g, dx);
        qlt_graph_phase(g, QLT_PHASE_LOSS);
        if (!g->planning && c->final_softcap > 0)
            be->lm_head_loss_softcap(be, opts->scalars, dx, opts->loss_scratch, g->values[hf].data, &m->lm_head,
                                     b->targets, n, c->final_softcap);
        else if (!g->planning)
            be->lm_head_loss(be, opts->scalars, dx, opts->loss_scratch, g->values[hf].data, &m->lm_head, b->targets, n);
    }
    return hf;
}
