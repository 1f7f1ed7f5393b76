/* graph_geglu.c: Gemma's GeGLU on the tape, h = gelu_tanh(gate) * up over the stacked gate+up rows, with its
 * backward beside it; the same shape and buffer handling as SwiGLU's (graph_elementwise.c), another activation. */
#include <stdint.h>

#include "autograd/graph.h"
#include "autograd/graph_internal.h"
#include "common/error.h"

/* gu [n, 2 * inter] act (gate | up) -> h [n, inter] act. */
int qlt_ag_geglu(qlt_graph *g, int gu, int64_t n, int64_t inter) {
    QLT_ASSERT(g->values[gu].count == n * 2 * inter);
    qlt_graph_tick(g);
    int h = qlt_graph_value(g, NULL, n * inter, g->values[gu].needs_grad);
    qlt_node *node = qlt_graph_push_node(g, QLT_NODE_GEGLU);
    node->in[0] = gu;
    node->out = h;
    node->u.swiglu.n = n;
    node->u.swiglu.inter = inter;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN) g->be->geglu_fwd(g->be, g->values[h].data, g->values[gu].data, n, inter);
    TOUCH(g->values[h].data);
    TOUCH(g->values[gu].data);
    return h;
}

/* gu's gradient overwrites gu (its only other reader, the gate+up linear, needs x and u, not gu) */
static void backward_geglu(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    const qlt_value *y = &g->values[node->out];
    qlt_value *gu = &g->values[node->in[0]];
    QLT_ASSERT(!gu->grad_ready);
    if (!gu->grad) gu->grad = gu->data;
    gu->grad_ready = 1;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN) be->geglu_bwd(be, gu->grad, y->grad, gu->data, node->u.swiglu.n, node->u.swiglu.inter);
}

const qlt_node_ops qlt_node_geglu = {
    .name = "geglu",
    .backward = backward_geglu,
};
