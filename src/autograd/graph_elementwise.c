/* graph_elementwise.c: the tape's elementwise ops, each recording function with its backward beside it:
 * SwiGLU over the stacked gate+up rows, the residual add (whose backward hands its gradient buffer on), and
 * custom nodes whose backward their creator supplies (gradient checkpointing). */
#include <stdint.h>

#include "autograd/graph.h"
#include "autograd/graph_internal.h"
#include "common/error.h"

/* gu [n, 2 * inter] act (gate | up) -> h [n, inter] act. */
int qlt_ag_swiglu(qlt_graph *g, int gu, int64_t n, int64_t inter) {
    QLT_ASSERT(g->values[gu].count == n * 2 * inter);
    qlt_graph_tick(g);
    int h = qlt_graph_value(g, NULL, n * inter, g->values[gu].needs_grad);
    qlt_node *node = qlt_graph_push_node(g, QLT_NODE_SWIGLU);
    node->in[0] = gu;
    node->out = h;
    node->u.swiglu.n = n;
    node->u.swiglu.inter = inter;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN) g->be->swiglu_fwd(g->be, g->values[h].data, g->values[gu].data, n, inter);
    TOUCH(g->values[h].data);
    TOUCH(g->values[gu].data);
    return h;
}

static void backward_swiglu(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    const qlt_value *y = &g->values[node->out];
    /* gu's gradient overwrites gu (its only other reader, the gate+up linear, needs x and u, not gu) */
    qlt_value *gu = &g->values[node->in[0]];
    QLT_ASSERT(!gu->grad_ready);
    if (!gu->grad) gu->grad = gu->data;
    gu->grad_ready = 1;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN) be->swiglu_bwd(be, gu->grad, y->grad, gu->data, node->u.swiglu.n, node->u.swiglu.inter);
}

const qlt_node_ops qlt_node_swiglu = {
    .name = "swiglu",
    .backward = backward_swiglu,
};

/* a, b [count] act -> y [count] act. */
int qlt_ag_add(qlt_graph *g, int a, int b) {
    QLT_ASSERT(g->values[a].count == g->values[b].count);
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, NULL, g->values[a].count, g->values[a].needs_grad || g->values[b].needs_grad);
    qlt_node *node = qlt_graph_push_node(g, QLT_NODE_ADD);
    node->in[0] = a;
    node->in[1] = b;
    node->out = y;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN) g->be->add(g->be, g->values[y].data, g->values[a].data, g->values[b].data, g->values[y].count);
    TOUCH(g->values[y].data);
    TOUCH(g->values[a].data);
    TOUCH(g->values[b].data);
    return y;
}

/* ADD's backward: both inputs' gradients equal the output's. Instead of copying, an input takes the
 * output's buffer itself when nothing else could write through it while another reader still needs it:
 * - the first input (the residual stream) when its gradient has no buffer yet;
 * - the second input when, besides, its producer is the node just before the add (so its backward, the
 *   only reader of that gradient, runs right after this one, before anything accumulates into the
 *   first input's gradient), it is not the first input, and that producer does not read the first input
 *   (y = a + f(a): f's backward would accumulate into a's gradient, the very buffer it reads dy from).
 * Otherwise the gradient is copied (first contribution) or added (later ones). */
static void backward_add(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    const qlt_value *y = &g->values[node->out];
    int index = (int)(node - g->nodes);
    for (int i = 0; i < 2; i++) {
        int x = node->in[i];
        qlt_value *xv = &g->values[x];
        if (!xv->needs_grad) continue;
        int alias = !xv->grad_ready && xv->grad == NULL;
        if (i == 1)
            alias = alias && x != node->in[0] && index > 0 && qlt_node_has_output(&g->nodes[index - 1], x) &&
                    !qlt_node_may_read(&g->nodes[index - 1], node->in[0]);
        if (alias) {
            xv->grad = y->grad;
            xv->grad_ready = 1;
            continue;
        }
        float beta = qlt_graph_grad_beta(g, x);
        qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
        if (!RUN) continue;
        if (beta != 0) be->add(be, xv->grad, xv->grad, y->grad, y->count);
        else be->copy(be, xv->grad, y->grad, y->count);
    }
}

const qlt_node_ops qlt_node_add = {
    .name = "add",
    .backward = backward_add,
};

/* in, out: values of the same count ([n, hidden] for a layer); out already holds the block's result. */
int qlt_ag_custom(qlt_graph *g, int in, int out, qlt_custom_backward backward, const void *ctx0, const void *ctx1,
                  const void *ctx2, const void *ctx3, int arg) {
    qlt_graph_tick(g);
    TOUCH(g->values[in].data);
    TOUCH(g->values[out].data);
    qlt_node *node = qlt_graph_push_node(g, QLT_NODE_CUSTOM);
    node->in[0] = in;
    node->out = out;
    node->u.custom.backward = backward;
    node->u.custom.ctx[0] = ctx0;
    node->u.custom.ctx[1] = ctx1;
    node->u.custom.ctx[2] = ctx2;
    node->u.custom.ctx[3] = ctx3;
    node->u.custom.arg = arg;
    return out;
}

static void backward_custom(qlt_graph *g, const qlt_node *node) { node->u.custom.backward(g, node); }

const qlt_node_ops qlt_node_custom = {
    .name = "custom",
    .backward = backward_custom,
    .reads_any = 1,
};
