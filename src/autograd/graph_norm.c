/* graph_norm.c: the tape's normalizations, each recording function with its backward beside it: RMSNorm,
 * the residual add fused with the RMSNorm after it (recorded as an add node and an RMSNorm node), and
 * Qwen3's per-head q/k norm fused with RoPE. */
#include <stdint.h>

#include "autograd/graph.h"
#include "autograd/graph_internal.h"
#include "common/error.h"

/* x [n, d] act, w [d] f32 -> y [n, d] act; rstd [n] f32 saved. */
int qlt_ag_rmsnorm(qlt_graph *g, int x, const float *w, int64_t n, int64_t d, float eps) {
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, NULL, n * d, g->values[x].needs_grad);
    float *rstd = qlt_graph_alloc(g, sizeof(float) * (size_t)n);
    qlt_node *node = qlt_graph_push_node(g, QLT_NODE_RMSNORM);
    node->in[0] = x;
    node->out = y;
    node->u.norm.rstd = rstd;
    node->u.norm.w = w;
    node->u.norm.n = n;
    node->u.norm.d = d;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN) g->be->rmsnorm_fwd(g->be, g->values[y].data, rstd, g->values[x].data, w, n, d, eps);
    TOUCH(g->values[y].data);
    TOUCH(rstd);
    TOUCH(g->values[x].data);
    return y;
}

static void backward_rmsnorm(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    const qlt_value *y = &g->values[node->out];
    int x = node->in[0];
    if (!g->values[x].needs_grad) return;
    float beta = qlt_graph_grad_beta(g, x);
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN)
        be->rmsnorm_bwd(be, g->values[x].grad, y->grad, g->values[x].data, node->u.norm.rstd, node->u.norm.w,
                        node->u.norm.n, node->u.norm.d, beta);
}

static void touch_rmsnorm(qlt_graph *g, const qlt_node *node) { TOUCH(node->u.norm.rstd); }

const qlt_node_ops qlt_node_rmsnorm = {
    .name = "rmsnorm",
    .backward = backward_rmsnorm,
    .touch_saved = touch_rmsnorm,
};

/* a, b [n, d] act -> sum [n, d] act, y [n, d] act; rstd [n] f32 saved. The add node's backward is
 * graph_elementwise.c's. */
int qlt_ag_add_rmsnorm(qlt_graph *g, int a, int b, const float *w, int64_t n, int64_t d, float eps, int *sum) {
    QLT_ASSERT(g->values[a].count == n * d && g->values[b].count == n * d);
    /* the same two nodes qlt_ag_add and qlt_ag_rmsnorm record, run by one fused kernel */
    qlt_graph_tick(g);
    int s = qlt_graph_value(g, NULL, n * d, g->values[a].needs_grad || g->values[b].needs_grad);
    qlt_node *add = qlt_graph_push_node(g, QLT_NODE_ADD);
    add->in[0] = a;
    add->in[1] = b;
    add->out = s;
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, NULL, n * d, g->values[s].needs_grad);
    float *rstd = qlt_graph_alloc(g, sizeof(float) * (size_t)n);
    qlt_node *norm = qlt_graph_push_node(g, QLT_NODE_RMSNORM);
    norm->in[0] = s;
    norm->out = y;
    norm->u.norm.rstd = rstd;
    norm->u.norm.w = w;
    norm->u.norm.n = n;
    norm->u.norm.d = d;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN)
        g->be->add_rmsnorm_fwd(g->be, g->values[s].data, g->values[y].data, rstd, g->values[a].data,
                               g->values[b].data, w, n, d, eps);
    TOUCH(g->values[a].data);
    TOUCH(g->values[b].data);
    TOUCH(g->values[s].data);
    TOUCH(g->values[y].data);
    TOUCH(rstd);
    *sum = s;
    return y;
}

/* x [n, heads * head_dim] act, w [head_dim] f32 -> y [n, heads * head_dim] act; rstd [n * heads] f32 saved. */
int qlt_ag_head_norm_rope(qlt_graph *g, int x, const float *w, const int32_t *pos, const float *inv_freq, int64_t n,
                          int heads, int head_dim, float eps) {
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, NULL, g->values[x].count, g->values[x].needs_grad);
    float *rstd = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * heads));
    qlt_node *node = qlt_graph_push_node(g, QLT_NODE_HEAD_NORM_ROPE);
    node->in[0] = x;
    node->out = y;
    node->u.hnr.rstd = rstd;
    node->u.hnr.w = w;
    node->u.hnr.pos = pos;
    node->u.hnr.inv_freq = inv_freq;
    node->u.hnr.n = n;
    node->u.hnr.heads = heads;
    node->u.hnr.head_dim = head_dim;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN)
        g->be->head_norm_rope_fwd(g->be, g->values[y].data, rstd, g->values[x].data, w, pos, inv_freq, n, heads,
                                  head_dim, eps);
    TOUCH(g->values[y].data);
    TOUCH(rstd);
    TOUCH(g->values[x].data);
    return y;
}

static void backward_head_norm_rope(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    const qlt_value *y = &g->values[node->out];
    /* x's gradient takes dy's buffer: the op runs in place */
    qlt_value *x = &g->values[node->in[0]];
    QLT_ASSERT(!x->grad_ready);
    if (!x->grad) x->grad = y->grad;
    x->grad_ready = 1;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN)
        be->head_norm_rope_bwd(be, x->grad, y->grad, x->data, node->u.hnr.rstd, node->u.hnr.w, node->u.hnr.pos,
                               node->u.hnr.inv_freq, node->u.hnr.n, node->u.hnr.heads, node->u.hnr.head_dim);
}

static void touch_head_norm_rope(qlt_graph *g, const qlt_node *node) { TOUCH(node->u.hnr.rstd); }

const qlt_node_ops qlt_node_head_norm_rope = {
    .name = "head_norm_rope",
    .backward = backward_head_norm_rope,
    .touch_saved = touch_head_norm_rope,
};
