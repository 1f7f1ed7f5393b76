/* graph.c: the tape core (see graph.h): values and their gradients, the arena and its planning hooks, the
 * nodes and the backward loop, which finds each node's backward in its kind's entry (graph_internal.h). The
 * recorded ops and their backwards live in graph_norm.c, graph_linear.c, graph_attention.c and
 * graph_elementwise.c. */
#include "autograd/graph.h"

#include <stdlib.h>
#include <string.h>

#include "autograd/graph_internal.h"
#include "common/error.h"

#define ARENA_ALIGN 256
#define PLAN_BASE ((char *)(uintptr_t)0x1000)

void qlt_graph_init(qlt_graph *g, qlt_backend *be, int reuse) {
    memset(g, 0, sizeof *g);
    g->be = be;
    g->reuse = reuse;
}

void qlt_graph_begin_plan(qlt_graph *g, int planning, int plan_id) {
    QLT_ASSERT(plan_id >= 0 && plan_id < QLT_GRAPH_PLANS);
    if (planning) {
        QLT_ASSERT(!g->reuse || !g->plans[plan_id].ready); /* a bump graph may be re-planned (it only grows) */
        if (g->reuse) qlt_arena_plan_reset(&g->plans[plan_id]);
    }
    g->planning = planning;
    g->plan_id = plan_id;
    g->alloc_index = 0;
    g->clock = 0;
    g->arena_used = 0;
    g->n_values = 0;
    g->n_nodes = 0;
}

void qlt_graph_begin(qlt_graph *g, int planning) { qlt_graph_begin_plan(g, planning, QLT_PLAN_TRAIN); }

size_t qlt_graph_planned_bytes(qlt_graph *g) {
    if (!g->reuse) return g->arena_peak;
    qlt_arena_plan_pack(&g->plans[g->plan_id], ARENA_ALIGN);
    return g->plans[g->plan_id].total;
}

int qlt_graph_commit_plan(qlt_graph *g) {
    QLT_ASSERT(g->planning);
    g->planning = 0;
    size_t need = g->arena_peak;
    if (g->reuse) {
        qlt_arena_plan_pack(&g->plans[g->plan_id], ARENA_ALIGN);
        need = g->plans[g->plan_id].total;
    }
    if (g->arena && need <= g->arena_cap) return 0;
    if (g->arena) g->be->free(g->be, g->arena);
    g->arena_cap = need;
    g->arena = g->be->alloc(g->be, g->arena_cap ? g->arena_cap : ARENA_ALIGN);
    if (!g->arena)
        return qlt_fail("out of %s memory: a step needs %.2f GiB of activations (try --set train.micro_batch=1, a "
                        "shorter data.seq_len, or --set train.grad_checkpoint=layer)", g->be->name,
                        (double)g->arena_cap / (1 << 30));
    return 0;
}

void qlt_graph_free(qlt_graph *g) {
    if (g->arena) g->be->free(g->be, g->arena);
    for (int i = 0; i < QLT_GRAPH_PLANS; i++) qlt_arena_plan_free(&g->plans[i]);
    free(g->values);
    free(g->nodes);
    memset(g, 0, sizeof *g);
}

void *qlt_graph_alloc(qlt_graph *g, size_t bytes) {
    size_t size = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (g->reuse && !g->planning) { /* the planned offset of this allocation */
        const qlt_arena_plan *p = &g->plans[g->plan_id];
        QLT_ASSERT(p->ready && g->alloc_index < p->n && p->size[g->alloc_index] == size); /* same pass as planned */
        return g->arena + p->offset[g->alloc_index++];
    }
    size_t start = g->arena_used;
    g->arena_used = start + size;
    if (g->arena_used > g->arena_peak) g->arena_peak = g->arena_used;
    if (g->planning) {
        if (g->reuse) qlt_arena_plan_add(&g->plans[g->plan_id], size, start, g->clock);
        g->alloc_index++;
        return PLAN_BASE + start;
    }
    QLT_ASSERT(g->arena_used <= g->arena_cap); /* same shapes as planned */
    return g->arena + start;
}

void qlt_graph_tick(qlt_graph *g) { g->clock++; }

void qlt_graph_touch(qlt_graph *g, const void *ptr) {
    if (!g->planning || !g->reuse || (const char *)ptr < PLAN_BASE) return;
    qlt_arena_plan *p = &g->plans[g->plan_id];
    int id = qlt_arena_plan_find(p, (size_t)((const char *)ptr - PLAN_BASE));
    if (id >= 0 && p->last[id] < g->clock) p->last[id] = g->clock;
}

size_t qlt_graph_act_bytes(const qlt_graph *g, int64_t count) {
    return (size_t)count * qlt_dtype_size(g->be->act_dtype);
}

int qlt_graph_value(qlt_graph *g, void *data, int64_t count, int needs_grad) {
    if (g->n_values == g->cap_values) {
        QLT_ASSERT(g->planning); /* tables are sized by the planning passes */
        g->cap_values = g->cap_values ? 2 * g->cap_values : 256;
        g->values = qlt_xrealloc(g->values, sizeof *g->values * (size_t)g->cap_values);
    }
    qlt_value *v = &g->values[g->n_values];
    v->data = data ? data : qlt_graph_alloc(g, qlt_graph_act_bytes(g, count));
    v->grad = NULL;
    v->count = count;
    v->needs_grad = needs_grad;
    v->grad_ready = 0;
    return g->n_values++;
}

void *qlt_graph_grad(qlt_graph *g, int v) {
    qlt_value *val = &g->values[v];
    if (!val->grad) val->grad = qlt_graph_alloc(g, qlt_graph_act_bytes(g, val->count));
    return val->grad;
}

qlt_node *qlt_graph_push_node(qlt_graph *g, qlt_node_kind kind) {
    if (g->n_nodes == g->cap_nodes) {
        QLT_ASSERT(g->planning);
        g->cap_nodes = g->cap_nodes ? 2 * g->cap_nodes : 256;
        g->nodes = qlt_xrealloc(g->nodes, sizeof *g->nodes * (size_t)g->cap_nodes);
    }
    qlt_node *n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->in[0] = n->in[1] = n->in[2] = -1;
    return n;
}

void qlt_graph_phase(qlt_graph *g, qlt_phase p) {
    if (!g->planning && g->be->phase) g->be->phase(g->be, p);
}

/* ---- the node kinds ---- */

static const qlt_node_ops *const node_kinds[QLT_NODE_KIND_COUNT] = {
    [QLT_NODE_RMSNORM] = &qlt_node_rmsnorm,
    [QLT_NODE_LINEAR] = &qlt_node_linear,
    [QLT_NODE_ROPE] = &qlt_node_rope,
    [QLT_NODE_HEAD_NORM_ROPE] = &qlt_node_head_norm_rope,
    [QLT_NODE_ATTENTION] = &qlt_node_attention,
    [QLT_NODE_SWIGLU] = &qlt_node_swiglu,
    [QLT_NODE_ADD] = &qlt_node_add,
    [QLT_NODE_GEGLU] = &qlt_node_geglu,
    [QLT_NODE_CUSTOM] = &qlt_node_custom,
};

const qlt_node_ops *qlt_node_ops_of(qlt_node_kind kind) {
    return (int)kind >= 0 && kind < QLT_NODE_KIND_COUNT ? node_kinds[kind] : NULL;
}

/* The entry of node's kind (every kind has one: test_graph_ops.c). */
static const qlt_node_ops *ops_of(const qlt_node *node) {
    const qlt_node_ops *ops = qlt_node_ops_of(node->kind);
    QLT_ASSERT(ops);
    return ops;
}

/* The output values of node into outs [QLT_STACK_MAX]; returns how many. */
static int node_outputs(const qlt_node *node, int *outs) {
    const qlt_node_ops *ops = ops_of(node);
    if (ops->outputs) return ops->outputs(node, outs);
    outs[0] = node->out;
    return 1;
}

int qlt_node_has_output(const qlt_node *node, int v) {
    int outs[QLT_STACK_MAX], count = node_outputs(node, outs);
    for (int i = 0; i < count; i++)
        if (outs[i] == v) return 1;
    return 0;
}

int qlt_node_may_read(const qlt_node *node, int v) {
    if (ops_of(node)->reads_any) return 1;
    for (int i = 0; i < 3; i++)
        if (node->in[i] == v) return 1;
    return 0;
}

/* ---- backward ---- */

float qlt_graph_grad_beta(qlt_graph *g, int v) {
    float beta = g->values[v].grad_ready ? 1.0f : 0.0f;
    qlt_graph_grad(g, v);
    g->values[v].grad_ready = 1;
    return beta;
}

/* Lifetimes: everything a node's backward reads or writes is alive at its clock. */
static void touch_node(qlt_graph *g, const qlt_node *node) {
    int outs[QLT_STACK_MAX], count = node_outputs(node, outs);
    for (int i = 0; i < count; i++) {
        TOUCH(g->values[outs[i]].grad);
        TOUCH(g->values[outs[i]].data);
    }
    for (int i = 0; i < 3; i++) {
        if (node->in[i] < 0) continue;
        TOUCH(g->values[node->in[i]].data);
        TOUCH(g->values[node->in[i]].grad);
    }
    const qlt_node_ops *ops = ops_of(node);
    if (ops->touch_saved) ops->touch_saved(g, node);
}

static void backward_node(qlt_graph *g, const qlt_node *node) {
    int outs[QLT_STACK_MAX], count = node_outputs(node, outs), ready = 0;
    for (int i = 0; i < count; i++) ready |= g->values[outs[i]].grad_ready;
    if (!ready) return; /* nothing flowed back into this op */
    qlt_graph_tick(g);
    ops_of(node)->backward(g, node);
    touch_node(g, node);
}

void qlt_graph_backward(qlt_graph *g) {
    for (int i = g->n_nodes - 1; i >= 0; i--) backward_node(g, &g->nodes[i]);
}
