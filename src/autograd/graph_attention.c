/* graph_attention.c: the tape's attention block, each recording function with its backward beside it:
 * RoPE (in place) and causal grouped-query attention over packed examples. */
#include <stdint.h>

#include "autograd/graph.h"
#include "autograd/graph_internal.h"
#include "common/error.h"

/* x [n, heads * head_dim] act rotated in place; pos [n] int32, inv_freq [rotary_dim / 2] f32. */
int qlt_ag_rope_scaled(qlt_graph *g, int x, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                       int head_dim, int rotary_dim, float attn_factor) {
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, g->values[x].data, g->values[x].count, g->values[x].needs_grad);
    qlt_node *node = qlt_graph_push_node(g, QLT_NODE_ROPE);
    node->in[0] = x;
    node->out = y;
    node->u.rope.pos = pos;
    node->u.rope.inv_freq = inv_freq;
    node->u.rope.n = n;
    node->u.rope.heads = heads;
    node->u.rope.head_dim = head_dim;
    node->u.rope.rotary_dim = rotary_dim;
    node->u.rope.attn_factor = attn_factor;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    int scaled = rotary_dim != head_dim || attn_factor != 1.0f;
    QLT_ASSERT(!scaled || g->be->rope_scaled); /* qlt_model_check_backend refused such a model */
    if (RUN && scaled)
        g->be->rope_scaled(g->be, g->values[y].data, pos, inv_freq, n, heads, head_dim, rotary_dim, attn_factor, 0);
    else if (RUN)
        g->be->rope(g->be, g->values[y].data, pos, inv_freq, n, heads, head_dim, 0);
    TOUCH(g->values[y].data);
    return y;
}

int qlt_ag_rope(qlt_graph *g, int x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim) {
    return qlt_ag_rope_scaled(g, x, pos, inv_freq, n, heads, head_dim, head_dim, 1.0f);
}

static void backward_rope(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    const qlt_value *y = &g->values[node->out];
    /* the rotation happened in place: rotate the gradient back in place and hand it to the input */
    qlt_value *x = &g->values[node->in[0]];
    QLT_ASSERT(!x->grad_ready);
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    const int scaled = node->u.rope.rotary_dim != node->u.rope.head_dim || node->u.rope.attn_factor != 1.0f;
    if (RUN && scaled)
        be->rope_scaled(be, y->grad, node->u.rope.pos, node->u.rope.inv_freq, node->u.rope.n, node->u.rope.heads,
                        node->u.rope.head_dim, node->u.rope.rotary_dim, node->u.rope.attn_factor, 1);
    else if (RUN)
        be->rope(be, y->grad, node->u.rope.pos, node->u.rope.inv_freq, node->u.rope.n, node->u.rope.heads,
                 node->u.rope.head_dim, 1);
    x->grad = y->grad;
    x->grad_ready = 1;
}

const qlt_node_ops qlt_node_rope = {
    .name = "rope",
    .backward = backward_rope,
};

/* q [n, n_heads * head_dim], k / v [n, n_kv_heads * head_dim] act -> o [n, n_heads * head_dim] act, n = batch *
 * seq; seg_start [n] int32; lse [n, n_heads] f32 saved. */
int qlt_ag_attention(qlt_graph *g, int q, int k, int v, const int32_t *seg_start, int batch, int seq, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
    return qlt_ag_attention_softcap(g, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale, 0);
}

/* softcap > 0 runs the backend's attention_softcap_fwd / _bwd (Gemma 2) */
int qlt_ag_attention_softcap(qlt_graph *g, int q, int k, int v, const int32_t *seg_start, int batch, int seq,
                             int n_heads, int n_kv_heads, int head_dim, float scale, float softcap) {
    int64_t n = (int64_t)batch * seq;
    qlt_graph_tick(g);
    int needs = g->values[q].needs_grad || g->values[k].needs_grad || g->values[v].needs_grad;
    int o = qlt_graph_value(g, NULL, n * n_heads * head_dim, needs);
    float *lse = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * n_heads));
    qlt_node *node = qlt_graph_push_node(g, QLT_NODE_ATTENTION);
    node->in[0] = q;
    node->in[1] = k;
    node->in[2] = v;
    node->out = o;
    node->u.attn.lse = lse;
    node->u.attn.seg_start = seg_start;
    node->u.attn.batch = batch;
    node->u.attn.seq = seq;
    node->u.attn.n_heads = n_heads;
    node->u.attn.n_kv_heads = n_kv_heads;
    node->u.attn.head_dim = head_dim;
    node->u.attn.scale = scale;
    node->u.attn.softcap = softcap;
    qlt_graph_phase(g, QLT_PHASE_ATTENTION);
    if (RUN && softcap > 0)
        g->be->attention_softcap_fwd(g->be, g->values[o].data, lse, g->values[q].data, g->values[k].data,
                                     g->values[v].data, seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale,
                                     softcap);
    else if (RUN)
        g->be->attention_fwd(g->be, g->values[o].data, lse, g->values[q].data, g->values[k].data, g->values[v].data,
                             seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale);
    TOUCH(g->values[o].data);
    TOUCH(lse);
    TOUCH(g->values[q].data);
    TOUCH(g->values[k].data);
    TOUCH(g->values[v].data);
    return o;
}

static void backward_attention(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    const qlt_value *y = &g->values[node->out];
    const int q = node->in[0], k = node->in[1], v = node->in[2];
    QLT_ASSERT(!g->values[q].grad_ready && !g->values[k].grad_ready && !g->values[v].grad_ready);
    qlt_graph_grad_beta(g, q);
    qlt_graph_grad_beta(g, k);
    qlt_graph_grad_beta(g, v);
    int64_t n = (int64_t)node->u.attn.batch * node->u.attn.seq;
    float *scratch = qlt_graph_alloc(g, be->attention_bwd_scratch_bytes(be, n, node->u.attn.n_heads,
                                                                        node->u.attn.n_kv_heads,
                                                                        node->u.attn.head_dim));
    TOUCH(scratch);
    qlt_graph_phase(g, QLT_PHASE_ATTENTION);
    if (RUN && node->u.attn.softcap > 0)
        be->attention_softcap_bwd(be, g->values[q].grad, g->values[k].grad, g->values[v].grad, scratch, y->grad,
                                  y->data, node->u.attn.lse, g->values[q].data, g->values[k].data, g->values[v].data,
                                  node->u.attn.seg_start, node->u.attn.batch, node->u.attn.seq, node->u.attn.n_heads,
                                  node->u.attn.n_kv_heads, node->u.attn.head_dim, node->u.attn.scale,
                                  node->u.attn.softcap);
    else if (RUN)
        be->attention_bwd(be, g->values[q].grad, g->values[k].grad, g->values[v].grad, scratch, y->grad, y->data,
                          node->u.attn.lse, g->values[q].data, g->values[k].data, g->values[v].data,
                          node->u.attn.seg_start, node->u.attn.batch, node->u.attn.seq, node->u.attn.n_heads,
                          node->u.attn.n_kv_heads, node->u.attn.head_dim, node->u.attn.scale);
}

static void touch_attention(qlt_graph *g, const qlt_node *node) { TOUCH(node->u.attn.lse); }

const qlt_node_ops qlt_node_attention = {
    .name = "attention",
    .backward = backward_attention,
    .touch_saved = touch_attention,
};
