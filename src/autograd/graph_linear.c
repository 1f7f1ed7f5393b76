/* graph_linear.c: the tape's linear group, its recording function with its backward beside it: a stack of
 * projections of one input through frozen weights, each with an optional LoRA adapter (its site: the output
 * columns it adds onto), run as one op each way when the backend fuses a group whose every weight has one. */
#include <stdint.h>

#include "autograd/graph.h"
#include "autograd/graph_internal.h"
#include "common/error.h"

/* Pointer to element `elems` of an act buffer. */
static void *act_at(const qlt_graph *g, void *base, int64_t elems) {
    return (char *)base + qlt_graph_act_bytes(g, elems);
}

/* The LoRA site of adapter j of a linear node: its output columns and, in the backward, their gradient. */
static qlt_lora_site lora_site(const qlt_graph *g, const qlt_node *node, int j) {
    int i = node->u.linear.lora_of[j];
    const qlt_lora_ref *l = &node->u.linear.lora[j];
    qlt_lora_site s;
    s.out = node->u.linear.w[i]->rows;
    s.a = l->a;
    s.b = l->b;
    s.da = l->da;
    s.db = l->db;
    if (node->u.linear.stacked) {
        int64_t col = 0, ld = 0;
        for (int p = 0; p < node->u.linear.k; p++) {
            if (p < i) col += node->u.linear.w[p]->rows;
            ld += node->u.linear.w[p]->rows;
        }
        const qlt_value *y = &g->values[node->u.linear.outs[0]];
        s.y = act_at(g, y->data, col);
        s.dy = y->grad ? act_at(g, y->grad, col) : NULL;
        s.ld = ld;
    } else {
        const qlt_value *y = &g->values[node->u.linear.outs[i]];
        s.y = y->data;
        s.dy = y->grad;
        s.ld = s.out;
    }
    return s;
}

/* x [n, in] act, W_i [out_i, in] -> stacked: y [n, sum out_i] act; else y_i [n, out_i] act each; with LoRA
 * A_i [r, in], B_i [out_i, r] f32, u [n, n_lora * r] f32 saved (and, with dropout, each adapter's input). */
void qlt_ag_linear_group(qlt_graph *g, int x, int k, const qlt_weight *const *w, const float *const *bias,
                         const qlt_lora_ref *const *lora, int stacked, int64_t n, int *outs) {
    qlt_backend *be = g->be;
    QLT_ASSERT(k >= 1 && k <= QLT_STACK_MAX);
    qlt_graph_tick(g);
    qlt_node *node = qlt_graph_push_node(g, QLT_NODE_LINEAR);
    node->in[0] = x;
    node->u.linear.k = k;
    node->u.linear.stacked = stacked;
    node->u.linear.n = n;
    int64_t rows = 0;
    for (int i = 0; i < k; i++) {
        QLT_ASSERT(w[i]->cols == w[0]->cols && (!stacked || !bias || !bias[i]));
        node->u.linear.w[i] = w[i];
        rows += w[i]->rows;
        if (lora && lora[i]) {
            int j = node->u.linear.n_lora++;
            node->u.linear.lora_of[j] = i;
            node->u.linear.lora[j] = *lora[i];
        }
    }
    int has_lora = node->u.linear.n_lora > 0, x_grad = g->values[x].needs_grad;
    int nl = node->u.linear.n_lora;
    if (nl == k && node->u.linear.lora[0].dropout == 0 && be->linear_lora_fwd) {
        /* every weight has an adapter: the backend runs the group with its adapters in one op */
        const qlt_lora_ref *l0 = &node->u.linear.lora[0];
        if (stacked) {
            outs[0] = qlt_graph_value(g, NULL, n * rows, 1);
            node->u.linear.outs[0] = outs[0];
        } else {
            for (int i = 0; i < k; i++) outs[i] = node->u.linear.outs[i] = qlt_graph_value(g, NULL, n * w[i]->rows, 1);
        }
        node->out = outs[0];
        node->u.linear.u = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * nl * l0->r));
        qlt_lora_site sites[QLT_STACK_MAX];
        for (int j = 0; j < nl; j++) {
            QLT_ASSERT(node->u.linear.lora[j].r == l0->r && node->u.linear.lora[j].scale == l0->scale &&
                       node->u.linear.lora[j].dropout == 0);
            sites[j] = lora_site(g, node, j);
        }
        qlt_graph_phase(g, QLT_PHASE_FWD_GEMM);
        if (RUN)
            be->linear_lora_fwd(be, stacked ? g->values[outs[0]].data : NULL, node->u.linear.u, g->values[x].data, w, k,
                                stacked ? NULL : bias, sites, n, l0->r, l0->scale);
        for (int i = 0; i < (stacked ? 1 : k); i++) TOUCH(g->values[outs[i]].data);
        TOUCH(g->values[x].data);
        TOUCH(node->u.linear.u);
        return;
    }
    qlt_graph_phase(g, QLT_PHASE_FWD_GEMM);
    if (stacked) {
        outs[0] = qlt_graph_value(g, NULL, n * rows, x_grad || has_lora);
        node->u.linear.outs[0] = outs[0];
        if (RUN) be->linear_fwd(be, g->values[outs[0]].data, g->values[x].data, w, k, NULL, n);
        TOUCH(g->values[outs[0]].data);
    } else {
        for (int i = 0; i < k; i++) {
            int has = 0;
            for (int j = 0; j < node->u.linear.n_lora; j++) has |= node->u.linear.lora_of[j] == i;
            outs[i] = qlt_graph_value(g, NULL, n * w[i]->rows, x_grad || has);
            node->u.linear.outs[i] = outs[i];
            if (RUN) be->linear_fwd(be, g->values[outs[i]].data, g->values[x].data, &w[i], 1, bias ? bias[i] : NULL, n);
            TOUCH(g->values[outs[i]].data);
        }
    }
    node->out = node->u.linear.outs[0];
    TOUCH(g->values[x].data);
    if (!has_lora) return;
    int r = node->u.linear.lora[0].r;
    float scale = node->u.linear.lora[0].scale, p = node->u.linear.lora[0].dropout;
    for (int j = 1; j < nl; j++)
        QLT_ASSERT(node->u.linear.lora[j].r == r && node->u.linear.lora[j].scale == scale &&
                   node->u.linear.lora[j].dropout == p);
    node->u.linear.u = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * nl * r));
    TOUCH(node->u.linear.u);
    int64_t in = w[0]->cols;
    if (p > 0) {
        /* each adapter has its own dropout mask: its own input, its own x.A^T */
        for (int j = 0; j < nl; j++) {
            const qlt_lora_ref *l = &node->u.linear.lora[j];
            void *xd = node->u.linear.x_drop[j] = qlt_graph_alloc(g, qlt_graph_act_bytes(g, n * in));
            TOUCH(xd);
            qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
            if (RUN) be->dropout(be, xd, g->values[x].data, n * in, p, l->dropout_seed, l->dropout_salt);
            qlt_graph_phase(g, QLT_PHASE_LORA);
            qlt_lora_site site = lora_site(g, node, j);
            if (RUN) be->lora_fwd(be, &site, 1, node->u.linear.u + (int64_t)j * n * r, xd, n, in, r, scale);
        }
        return;
    }
    qlt_lora_site sites[QLT_STACK_MAX];
    for (int j = 0; j < nl; j++) sites[j] = lora_site(g, node, j);
    qlt_graph_phase(g, QLT_PHASE_LORA);
    if (RUN) be->lora_fwd(be, sites, nl, node->u.linear.u, g->values[x].data, n, in, r, scale);
}

int qlt_ag_linear(qlt_graph *g, int x, const qlt_weight *w, const float *bias, const qlt_lora_ref *lora, int64_t n) {
    int out;
    qlt_ag_linear_group(g, x, 1, &w, &bias, &lora, bias == NULL, n, &out);
    return out;
}

static void backward_linear(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    int x = node->in[0], k = node->u.linear.k, nl = node->u.linear.n_lora;
    int want_dx = g->values[x].needs_grad;
    const qlt_weight *const *w = node->u.linear.w;
    int64_t n = node->u.linear.n, in = w[0]->cols;
    for (int j = 0; j < nl; j++) /* an adapter's output without a gradient would need a zero buffer */
        QLT_ASSERT(g->values[node->u.linear.outs[node->u.linear.stacked ? 0 : node->u.linear.lora_of[j]]].grad_ready);
    if (nl == k && want_dx && node->u.linear.lora[0].dropout == 0 && be->linear_lora_bwd) {
        /* the group's frozen GEMMs and adapters in one op (the backend may fold adapters into the GEMMs) */
        const qlt_lora_ref *l = &node->u.linear.lora[0];
        float *scratch = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * nl * l->r));
        TOUCH(scratch);
        float beta = qlt_graph_grad_beta(g, x);
        qlt_lora_site sites[QLT_STACK_MAX];
        for (int j = 0; j < nl; j++) sites[j] = lora_site(g, node, j);
        qlt_graph_phase(g, QLT_PHASE_BWD_GEMM);
        if (RUN)
            be->linear_lora_bwd(be, g->values[x].grad, beta, w, k, node->u.linear.stacked, sites, scratch,
                                node->u.linear.u, g->values[x].data, n, l->r, l->scale);
        return;
    }
    float beta = 0;
    if (want_dx) {
        beta = qlt_graph_grad_beta(g, x);
        qlt_graph_phase(g, QLT_PHASE_BWD_GEMM);
        if (node->u.linear.stacked) {
            if (RUN) be->linear_bwd_x(be, g->values[x].grad, g->values[node->out].grad, w, k, n, beta);
            beta = 1;
        } else {
            for (int i = 0; i < k; i++) {
                const qlt_value *y = &g->values[node->u.linear.outs[i]];
                if (!y->grad_ready) continue;
                if (RUN) be->linear_bwd_x(be, g->values[x].grad, y->grad, &w[i], 1, n, beta);
                beta = 1;
            }
        }
    }
    if (nl == 0) return;
    const qlt_lora_ref *l0 = &node->u.linear.lora[0];
    int r = l0->r;
    float *scratch = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * nl * r));
    TOUCH(scratch);
    qlt_graph_phase(g, QLT_PHASE_LORA);
    if (l0->dropout > 0) {
        /* each adapter's input was its own dropout(x): its gradient passes back through the same mask */
        void *dxl = want_dx ? qlt_graph_alloc(g, qlt_graph_act_bytes(g, n * in)) : NULL;
        TOUCH(dxl);
        for (int j = 0; j < nl; j++) {
            const qlt_lora_ref *l = &node->u.linear.lora[j];
            qlt_lora_site site = lora_site(g, node, j);
            qlt_graph_phase(g, QLT_PHASE_LORA);
            if (!RUN) continue;
            be->lora_bwd(be, &site, 1, scratch, node->u.linear.u + (int64_t)j * n * r, node->u.linear.x_drop[j], dxl,
                         0.0f, n, in, r, l->scale);
            if (!want_dx) continue;
            qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
            be->dropout(be, dxl, dxl, n * in, l->dropout, l->dropout_seed, l->dropout_salt);
            be->add(be, g->values[x].grad, g->values[x].grad, dxl, n * in);
        }
        return;
    }
    qlt_lora_site sites[QLT_STACK_MAX];
    for (int j = 0; j < nl; j++) sites[j] = lora_site(g, node, j);
    if (RUN)
        be->lora_bwd(be, sites, nl, scratch, node->u.linear.u, g->values[x].data, want_dx ? g->values[x].grad : NULL,
                     beta, n, in, r, l0->scale);
}

static int linear_outputs(const qlt_node *node, int *outs) {
    int count = node->u.linear.stacked ? 1 : node->u.linear.k;
    for (int i = 0; i < count; i++) outs[i] = node->u.linear.outs[i];
    return count;
}

static void touch_linear(qlt_graph *g, const qlt_node *node) {
    TOUCH(node->u.linear.u);
    for (int j = 0; j < node->u.linear.n_lora; j++) TOUCH(node->u.linear.x_drop[j]);
}

const qlt_node_ops qlt_node_linear = {
    .name = "linear",
    .backward = backward_linear,
    .outputs = linear_outputs,
    .touch_saved = touch_linear,
};
