/* graph.c: the tape, its arena and the backward of every recorded op (see graph.h). */
#include "autograd/graph.h"

#include <stdlib.h>
#include <string.h>

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
    g->planned = 1;
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

static size_t act_bytes(const qlt_graph *g, int64_t count) { return (size_t)count * qlt_dtype_size(g->be->act_dtype); }

int qlt_graph_value(qlt_graph *g, void *data, int64_t count, int needs_grad) {
    if (g->n_values == g->cap_values) {
        QLT_ASSERT(g->planning); /* tables are sized by the planning passes */
        g->cap_values = g->cap_values ? 2 * g->cap_values : 256;
        g->values = qlt_xrealloc(g->values, sizeof *g->values * (size_t)g->cap_values);
    }
    qlt_value *v = &g->values[g->n_values];
    v->data = data ? data : qlt_graph_alloc(g, act_bytes(g, count));
    v->grad = NULL;
    v->count = count;
    v->needs_grad = needs_grad;
    v->grad_ready = 0;
    return g->n_values++;
}

void *qlt_graph_grad(qlt_graph *g, int v) {
    qlt_value *val = &g->values[v];
    if (!val->grad) val->grad = qlt_graph_alloc(g, act_bytes(g, val->count));
    return val->grad;
}

static qlt_node *push_node(qlt_graph *g, qlt_node_kind kind) {
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

#define RUN (!g->planning)
#define TOUCH(p) qlt_graph_touch(g, (p))

void qlt_graph_phase(qlt_graph *g, qlt_phase p) {
    if (!g->planning && g->be->phase) g->be->phase(g->be, p);
}

int qlt_ag_rmsnorm(qlt_graph *g, int x, const float *w, int64_t n, int64_t d, float eps) {
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, NULL, n * d, g->values[x].needs_grad);
    float *rstd = qlt_graph_alloc(g, sizeof(float) * (size_t)n);
    qlt_node *node = push_node(g, QLT_NODE_RMSNORM);
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

int qlt_ag_linear(qlt_graph *g, int x, const qlt_weight *w, const float *bias, const qlt_lora_ref *lora, int64_t n) {
    qlt_backend *be = g->be;
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, NULL, n * w->rows, g->values[x].needs_grad || lora != NULL);
    qlt_node *node = push_node(g, QLT_NODE_LINEAR);
    node->in[0] = x;
    node->out = y;
    node->u.linear.w = w;
    node->u.linear.n = n;
    qlt_graph_phase(g, QLT_PHASE_FWD_GEMM);
    if (RUN) be->linear_fwd(be, g->values[y].data, g->values[x].data, w, bias, n);
    TOUCH(g->values[y].data);
    TOUCH(g->values[x].data);
    if (lora) {
        node->u.linear.has_lora = 1;
        node->u.linear.lora = *lora;
        node->u.linear.u = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * lora->r));
        const void *xin = g->values[x].data;
        if (lora->dropout > 0) {
            node->u.linear.x_drop = qlt_graph_alloc(g, act_bytes(g, n * w->cols));
            qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
            if (RUN) be->dropout(be, node->u.linear.x_drop, xin, n * w->cols, lora->dropout, lora->dropout_seed, lora->dropout_salt);
            xin = node->u.linear.x_drop;
        }
        qlt_graph_phase(g, QLT_PHASE_LORA);
        if (RUN)
            be->lora_fwd(be, g->values[y].data, node->u.linear.u, xin, lora->a, lora->b, n, w->cols, w->rows, lora->r,
                         lora->scale);
        TOUCH(node->u.linear.u);
        TOUCH(node->u.linear.x_drop);
    }
    return y;
}

int qlt_ag_rope(qlt_graph *g, int x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim) {
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, g->values[x].data, g->values[x].count, g->values[x].needs_grad);
    qlt_node *node = push_node(g, QLT_NODE_ROPE);
    node->in[0] = x;
    node->out = y;
    node->u.rope.pos = pos;
    node->u.rope.inv_freq = inv_freq;
    node->u.rope.n = n;
    node->u.rope.heads = heads;
    node->u.rope.head_dim = head_dim;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN) g->be->rope(g->be, g->values[y].data, pos, inv_freq, n, heads, head_dim, 0);
    TOUCH(g->values[y].data);
    return y;
}

int qlt_ag_attention(qlt_graph *g, int q, int k, int v, const int32_t *seg_start, int batch, int seq, int n_heads,
                     int n_kv_heads, int head_dim, float scale) {
    int64_t n = (int64_t)batch * seq;
    qlt_graph_tick(g);
    int needs = g->values[q].needs_grad || g->values[k].needs_grad || g->values[v].needs_grad;
    int o = qlt_graph_value(g, NULL, n * n_heads * head_dim, needs);
    float *lse = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * n_heads));
    qlt_node *node = push_node(g, QLT_NODE_ATTENTION);
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
    qlt_graph_phase(g, QLT_PHASE_ATTENTION);
    if (RUN)
        g->be->attention_fwd(g->be, g->values[o].data, lse, g->values[q].data, g->values[k].data, g->values[v].data,
                             seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale);
    TOUCH(g->values[o].data);
    TOUCH(lse);
    TOUCH(g->values[q].data);
    TOUCH(g->values[k].data);
    TOUCH(g->values[v].data);
    return o;
}

int qlt_ag_swiglu(qlt_graph *g, int gate, int up) {
    QLT_ASSERT(g->values[gate].count == g->values[up].count);
    qlt_graph_tick(g);
    int h = qlt_graph_value(g, NULL, g->values[gate].count, g->values[gate].needs_grad || g->values[up].needs_grad);
    qlt_node *node = push_node(g, QLT_NODE_SWIGLU);
    node->in[0] = gate;
    node->in[1] = up;
    node->out = h;
    qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
    if (RUN) g->be->swiglu_fwd(g->be, g->values[h].data, g->values[gate].data, g->values[up].data, g->values[h].count);
    TOUCH(g->values[h].data);
    TOUCH(g->values[gate].data);
    TOUCH(g->values[up].data);
    return h;
}

int qlt_ag_add(qlt_graph *g, int a, int b) {
    QLT_ASSERT(g->values[a].count == g->values[b].count);
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, NULL, g->values[a].count, g->values[a].needs_grad || g->values[b].needs_grad);
    qlt_node *node = push_node(g, QLT_NODE_ADD);
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

int qlt_ag_custom(qlt_graph *g, int in, int out, qlt_custom_backward backward, const void *ctx0, const void *ctx1,
                  const void *ctx2, const void *ctx3, int arg) {
    qlt_graph_tick(g);
    TOUCH(g->values[in].data);
    TOUCH(g->values[out].data);
    qlt_node *node = push_node(g, QLT_NODE_CUSTOM);
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

/* ---- backward ---- */

/* Beta for accumulating into value v's gradient (0: first contribution), and marks it ready. */
static float grad_beta(qlt_graph *g, int v) {
    float beta = g->values[v].grad_ready ? 1.0f : 0.0f;
    qlt_graph_grad(g, v);
    g->values[v].grad_ready = 1;
    return beta;
}

static void backward_linear(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    const qlt_value *y = &g->values[node->out];
    int x = node->in[0];
    int want_dx = g->values[x].needs_grad;
    const qlt_weight *w = node->u.linear.w;
    int64_t n = node->u.linear.n;
    float beta = 0;
    if (want_dx) {
        beta = grad_beta(g, x);
        qlt_graph_phase(g, QLT_PHASE_BWD_GEMM);
        if (RUN) be->linear_bwd_x(be, g->values[x].grad, y->grad, w, n, beta);
    }
    if (!node->u.linear.has_lora) return;
    const qlt_lora_ref *l = &node->u.linear.lora;
    float *scratch = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * l->r));
    TOUCH(scratch);
    TOUCH(node->u.linear.u);
    TOUCH(node->u.linear.x_drop);
    qlt_graph_phase(g, QLT_PHASE_LORA);
    if (l->dropout > 0) {
        /* the LoRA input was dropout(x): its gradient passes back through the same mask */
        void *dxl = want_dx ? qlt_graph_alloc(g, act_bytes(g, n * w->cols)) : NULL;
        TOUCH(dxl);
        if (RUN)
            be->lora_bwd(be, dxl, l->da, l->db, scratch, y->grad, node->u.linear.x_drop, node->u.linear.u, l->a, l->b,
                         n, w->cols, w->rows, l->r, l->scale, 0.0f);
        if (want_dx && RUN) {
            qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
            be->dropout(be, dxl, dxl, n * w->cols, l->dropout, l->dropout_seed, l->dropout_salt);
            be->add(be, g->values[x].grad, g->values[x].grad, dxl, n * w->cols);
        }
    } else if (RUN) {
        be->lora_bwd(be, want_dx ? g->values[x].grad : NULL, l->da, l->db, scratch, y->grad, g->values[x].data,
                     node->u.linear.u, l->a, l->b, n, w->cols, w->rows, l->r, l->scale, 1.0f);
    }
}

/* Lifetimes: everything a node's backward reads or writes is alive at its clock. */
static void touch_node(qlt_graph *g, const qlt_node *node) {
    const qlt_value *y = &g->values[node->out];
    TOUCH(y->grad);
    TOUCH(y->data);
    for (int i = 0; i < 3; i++) {
        if (node->in[i] < 0) continue;
        TOUCH(g->values[node->in[i]].data);
        TOUCH(g->values[node->in[i]].grad);
    }
    if (node->kind == QLT_NODE_RMSNORM) TOUCH(node->u.norm.rstd);
    if (node->kind == QLT_NODE_ATTENTION) TOUCH(node->u.attn.lse);
}

static void backward_node(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    qlt_value *y = &g->values[node->out];
    if (!y->grad_ready) return; /* nothing flowed back into this op */
    qlt_graph_tick(g);
    switch (node->kind) {
    case QLT_NODE_RMSNORM: {
        int x = node->in[0];
        if (!g->values[x].needs_grad) return;
        float beta = grad_beta(g, x);
        qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
        if (RUN)
            be->rmsnorm_bwd(be, g->values[x].grad, y->grad, g->values[x].data, node->u.norm.rstd, node->u.norm.w,
                            node->u.norm.n, node->u.norm.d, beta);
        break;
    }
    case QLT_NODE_LINEAR: backward_linear(g, node); break;
    case QLT_NODE_ROPE: {
        /* the rotation happened in place: rotate the gradient back in place and hand it to the input */
        qlt_value *x = &g->values[node->in[0]];
        QLT_ASSERT(!x->grad_ready);
        qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
        if (RUN)
            be->rope(be, y->grad, node->u.rope.pos, node->u.rope.inv_freq, node->u.rope.n, node->u.rope.heads,
                     node->u.rope.head_dim, 1);
        x->grad = y->grad;
        x->grad_ready = 1;
        break;
    }
    case QLT_NODE_ATTENTION: {
        const int q = node->in[0], k = node->in[1], v = node->in[2];
        QLT_ASSERT(!g->values[q].grad_ready && !g->values[k].grad_ready && !g->values[v].grad_ready);
        grad_beta(g, q);
        grad_beta(g, k);
        grad_beta(g, v);
        int64_t n = (int64_t)node->u.attn.batch * node->u.attn.seq;
        float *scratch = qlt_graph_alloc(g, be->attention_bwd_scratch_bytes(be, n, node->u.attn.n_heads,
                                                                            node->u.attn.n_kv_heads,
                                                                            node->u.attn.head_dim));
        TOUCH(scratch);
        qlt_graph_phase(g, QLT_PHASE_ATTENTION);
        if (RUN)
            be->attention_bwd(be, g->values[q].grad, g->values[k].grad, g->values[v].grad, scratch, y->grad, y->data,
                              node->u.attn.lse, g->values[q].data, g->values[k].data, g->values[v].data,
                              node->u.attn.seg_start, node->u.attn.batch, node->u.attn.seq, node->u.attn.n_heads,
                              node->u.attn.n_kv_heads, node->u.attn.head_dim, node->u.attn.scale);
        break;
    }
    case QLT_NODE_SWIGLU: {
        const int gate = node->in[0], up = node->in[1];
        QLT_ASSERT(!g->values[gate].grad_ready && !g->values[up].grad_ready);
        grad_beta(g, gate);
        grad_beta(g, up);
        qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
        if (RUN)
            be->swiglu_bwd(be, g->values[gate].grad, g->values[up].grad, y->grad, g->values[gate].data,
                           g->values[up].data, y->count);
        break;
    }
    case QLT_NODE_CUSTOM: node->u.custom.backward(g, node); break;
    case QLT_NODE_ADD:
        for (int i = 0; i < 2; i++) {
            int x = node->in[i];
            if (!g->values[x].needs_grad) continue;
            float beta = grad_beta(g, x);
            qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
            if (!RUN) continue;
            if (beta != 0) be->add(be, g->values[x].grad, g->values[x].grad, y->grad, y->count);
            else be->copy(be, g->values[x].grad, y->grad, y->count);
        }
        break;
    }
    touch_node(g, node);
}

void qlt_graph_backward(qlt_graph *g) {
    for (int i = g->n_nodes - 1; i >= 0; i--) backward_node(g, &g->nodes[i]);
}
