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

/* Pointer to element `elems` of an act buffer. */
static void *act_at(const qlt_graph *g, void *base, int64_t elems) {
    return (char *)base + act_bytes(g, elems);
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

void qlt_ag_linear_group(qlt_graph *g, int x, int k, const qlt_weight *const *w, const float *const *bias,
                         const qlt_lora_ref *const *lora, int stacked, int64_t n, int *outs) {
    qlt_backend *be = g->be;
    QLT_ASSERT(k >= 1 && k <= QLT_STACK_MAX);
    qlt_graph_tick(g);
    qlt_node *node = push_node(g, QLT_NODE_LINEAR);
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
            void *xd = node->u.linear.x_drop[j] = qlt_graph_alloc(g, act_bytes(g, n * in));
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

int qlt_ag_head_norm_rope(qlt_graph *g, int x, const float *w, const int32_t *pos, const float *inv_freq, int64_t n,
                          int heads, int head_dim, float eps) {
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, NULL, g->values[x].count, g->values[x].needs_grad);
    float *rstd = qlt_graph_alloc(g, sizeof(float) * (size_t)(n * heads));
    qlt_node *node = push_node(g, QLT_NODE_HEAD_NORM_ROPE);
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

int qlt_ag_swiglu(qlt_graph *g, int gu, int64_t n, int64_t inter) {
    QLT_ASSERT(g->values[gu].count == n * 2 * inter);
    qlt_graph_tick(g);
    int h = qlt_graph_value(g, NULL, n * inter, g->values[gu].needs_grad);
    qlt_node *node = push_node(g, QLT_NODE_SWIGLU);
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

int qlt_ag_add_rmsnorm(qlt_graph *g, int a, int b, const float *w, int64_t n, int64_t d, float eps, int *sum) {
    QLT_ASSERT(g->values[a].count == n * d && g->values[b].count == n * d);
    /* the same two nodes qlt_ag_add and qlt_ag_rmsnorm record, run by one fused kernel */
    qlt_graph_tick(g);
    int s = qlt_graph_value(g, NULL, n * d, g->values[a].needs_grad || g->values[b].needs_grad);
    qlt_node *add = push_node(g, QLT_NODE_ADD);
    add->in[0] = a;
    add->in[1] = b;
    add->out = s;
    qlt_graph_tick(g);
    int y = qlt_graph_value(g, NULL, n * d, g->values[s].needs_grad);
    float *rstd = qlt_graph_alloc(g, sizeof(float) * (size_t)n);
    qlt_node *norm = push_node(g, QLT_NODE_RMSNORM);
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
        float beta = grad_beta(g, x);
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
        beta = grad_beta(g, x);
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
        void *dxl = want_dx ? qlt_graph_alloc(g, act_bytes(g, n * in)) : NULL;
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

/* Whether value v is an output of node (the one a backward handing out gradients may alias). */
static int node_outputs(const qlt_node *node, int v) {
    if (node->kind != QLT_NODE_LINEAR) return node->out == v;
    int count = node->u.linear.stacked ? 1 : node->u.linear.k;
    for (int i = 0; i < count; i++)
        if (node->u.linear.outs[i] == v) return 1;
    return 0;
}

/* Whether node may read value v in its backward: one of its inputs (a custom node's reads are unknown). */
static int node_reads(const qlt_node *node, int v) {
    if (node->kind == QLT_NODE_CUSTOM) return 1;
    for (int i = 0; i < 3; i++)
        if (node->in[i] == v) return 1;
    return 0;
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
            alias = alias && x != node->in[0] && index > 0 && node_outputs(&g->nodes[index - 1], x) &&
                    !node_reads(&g->nodes[index - 1], node->in[0]);
        if (alias) {
            xv->grad = y->grad;
            xv->grad_ready = 1;
            continue;
        }
        float beta = grad_beta(g, x);
        qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
        if (!RUN) continue;
        if (beta != 0) be->add(be, xv->grad, xv->grad, y->grad, y->count);
        else be->copy(be, xv->grad, y->grad, y->count);
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
    if (node->kind == QLT_NODE_HEAD_NORM_ROPE) TOUCH(node->u.hnr.rstd);
    if (node->kind == QLT_NODE_ATTENTION) TOUCH(node->u.attn.lse);
    if (node->kind == QLT_NODE_LINEAR) {
        for (int i = 0; i < (node->u.linear.stacked ? 1 : node->u.linear.k); i++) {
            TOUCH(g->values[node->u.linear.outs[i]].data);
            TOUCH(g->values[node->u.linear.outs[i]].grad);
        }
        TOUCH(node->u.linear.u);
        for (int j = 0; j < node->u.linear.n_lora; j++) TOUCH(node->u.linear.x_drop[j]);
    }
}

static void backward_node(qlt_graph *g, const qlt_node *node) {
    qlt_backend *be = g->be;
    qlt_value *y = &g->values[node->out];
    int ready = y->grad_ready;
    if (node->kind == QLT_NODE_LINEAR && !node->u.linear.stacked)
        for (int i = 1; i < node->u.linear.k; i++) ready |= g->values[node->u.linear.outs[i]].grad_ready;
    if (!ready) return; /* nothing flowed back into this op */
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
        /* gu's gradient overwrites gu (its only other reader, the gate+up linear, needs x and u, not gu) */
        qlt_value *gu = &g->values[node->in[0]];
        QLT_ASSERT(!gu->grad_ready);
        if (!gu->grad) gu->grad = gu->data;
        gu->grad_ready = 1;
        qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
        if (RUN) be->swiglu_bwd(be, gu->grad, y->grad, gu->data, node->u.swiglu.n, node->u.swiglu.inter);
        break;
    }
    case QLT_NODE_HEAD_NORM_ROPE: {
        /* x's gradient takes dy's buffer: the op runs in place */
        qlt_value *x = &g->values[node->in[0]];
        QLT_ASSERT(!x->grad_ready);
        if (!x->grad) x->grad = y->grad;
        x->grad_ready = 1;
        qlt_graph_phase(g, QLT_PHASE_ELEMENTWISE);
        if (RUN)
            be->head_norm_rope_bwd(be, x->grad, y->grad, x->data, node->u.hnr.rstd, node->u.hnr.w, node->u.hnr.pos,
                                   node->u.hnr.inv_freq, node->u.hnr.n, node->u.hnr.heads, node->u.hnr.head_dim);
        break;
    }
    case QLT_NODE_CUSTOM: node->u.custom.backward(g, node); break;
    case QLT_NODE_ADD: backward_add(g, node); break;
    }
    touch_node(g, node);
}

void qlt_graph_backward(qlt_graph *g) {
    for (int i = g->n_nodes - 1; i >= 0; i--) backward_node(g, &g->nodes[i]);
}
