/* graph.h: the autograd tape. The forward records each op (with what its backward needs) as it runs;
 * qlt_graph_backward replays the tape in reverse. Only values downstream of a trainable parameter
 * (LoRA A/B) carry gradients; frozen weights never get gradient buffers.
 *
 * Memory: every activation, saved statistic and activation gradient of a step comes from one arena that
 * is planned once per batch shape: a planning pass records the same ops without running them and only
 * measures the arena; then the arena is allocated once and every later step reuses the same addresses.
 * Nothing is allocated inside a step, which is what lets CUDA capture a whole step as a graph.
 * Conventions: "activations use =, parameters use +=": parameter gradients accumulate across
 * micro-batches, activation gradients are written by their first contribution (beta 0) and accumulated
 * by later ones (beta 1).
 * Files: graph.c is the tape core (values, gradients, the arena, the backward loop); each recorded op and its
 * backward sit together in graph_norm.c, graph_linear.c, graph_attention.c or graph_elementwise.c
 * (graph_internal.h: what they share with the core). */
#ifndef QLT_GRAPH_H
#define QLT_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "autograd/arena_plan.h"
#include "backend/backend.h"

/* Plans of one graph (different op sequences sharing its arena): a training micro-step, a forward only. */
enum { QLT_PLAN_TRAIN = 0, QLT_PLAN_EVAL = 1, QLT_GRAPH_PLANS = 2 };

typedef struct qlt_value {
    void *data;     /* act elements [count] (backend memory) */
    void *grad;     /* same shape; NULL until the backward first writes it */
    int64_t count;
    int needs_grad; /* downstream of a trainable parameter */
    int grad_ready; /* grad holds a contribution */
} qlt_value;

/* Shapes: n tokens (batch * seq); "act" is the backend's activation dtype (be->act_dtype: float32 on the
 * CPU, bf16 on CUDA); weights and saved statistics are as noted. */
typedef enum qlt_node_kind {
    QLT_NODE_RMSNORM = 0,    /* x [n, d] act, w [d] f32 -> y [n, d] act; saves rstd [n] f32 */
    QLT_NODE_LINEAR,         /* a stack of k projections of one input (one weight, gate+up, or q/k/v):
                              * x [n, in] act, W_i [out_i, in] (f32, bf16, f16 or NF4), bias_i [out_i] f32 ->
                              * stacked: y [n, sum out_i] act; else y_i [n, out_i] act each; with LoRA
                              * A_i [r, in], B_i [out_i, r] f32, saves u [n, n_lora * r] f32 */
    QLT_NODE_ROPE,           /* x [n, heads * head_dim] act, rotated in place (y shares x's storage);
                              * pos [n] int32, inv_freq [head_dim / 2] f32 */
    QLT_NODE_HEAD_NORM_ROPE, /* Qwen3 q/k norm + RoPE, fused: x [n, heads * head_dim] act, w [head_dim] f32 ->
                              * y [n, heads * head_dim] act; saves rstd [n * heads] f32 */
    QLT_NODE_ATTENTION,      /* q [n, n_heads * head_dim], k / v [n, n_kv_heads * head_dim] act ->
                              * y [n, n_heads * head_dim] act; seg_start [n] int32; saves lse [n, n_heads] f32 */
    QLT_NODE_SWIGLU,         /* gu [n, 2 * inter] act (gate | up) -> h [n, inter] act */
    QLT_NODE_ADD,            /* a, b [count] act -> y [count] act */
    QLT_NODE_CUSTOM,         /* a block whose backward is supplied by its creator (gradient checkpointing):
                              * in and out values of the same count, [n, hidden] for a layer */
    QLT_NODE_GEGLU,          /* gu [n, 2 * inter] act (gate | up) -> h [n, inter] act (Gemma: gelu_tanh(gate) * up) */
    QLT_NODE_KIND_COUNT,     /* the number of kinds (not a kind) */
} qlt_node_kind;

typedef struct qlt_graph qlt_graph;
struct qlt_node;
typedef void (*qlt_custom_backward)(qlt_graph *g, const struct qlt_node *node);

/* LoRA side path of a linear node: pointers into the LoRA arenas. */
typedef struct qlt_lora_ref {
    const float *a; /* [r, in] */
    const float *b; /* [out, r] */
    float *da, *db; /* gradients, += */
    int r;
    float scale;
    float dropout;                /* 0 = none */
    const uint64_t *dropout_seed; /* backend memory: the micro-batch's seed */
    uint64_t dropout_salt;        /* this site (layer, projection) */
} qlt_lora_ref;

typedef struct qlt_node {
    qlt_node_kind kind;
    int in[3];
    int out;
    union {
        struct { float *rstd; const float *w; int64_t n, d; } norm;
        struct {
            const qlt_weight *w[QLT_STACK_MAX];
            int k, stacked;                     /* stacked: one output [n, sum rows]; else k outputs */
            int outs[QLT_STACK_MAX];            /* output values (stacked: outs[0] only) */
            int64_t n;
            int n_lora;                         /* projections with an adapter ... */
            int lora_of[QLT_STACK_MAX];         /* ... their weight index ... */
            qlt_lora_ref lora[QLT_STACK_MAX];   /* ... and adapter */
            float *u;                           /* [n, n_lora * r] (with dropout: n_lora blocks of [n, r]) */
            void *x_drop[QLT_STACK_MAX];        /* dropout(x) per adapter, or NULL */
        } linear;
        struct { const int32_t *pos; const float *inv_freq; int64_t n; int heads, head_dim, rotary_dim; float attn_factor; } rope;
        struct { float *rstd; const float *w; const int32_t *pos; const float *inv_freq; int64_t n; int heads, head_dim; } hnr;
        struct { int64_t n, inter; } swiglu;
        struct { float *lse; const int32_t *seg_start; int batch, seq, n_heads, n_kv_heads, head_dim; float scale, softcap; } attn;
        struct { qlt_custom_backward backward; const void *ctx[4]; int arg; } custom;
    } u;
} qlt_node;

struct qlt_graph {
    qlt_backend *be;
    int planning;        /* record and measure only; run nothing */
    int reuse;           /* lifetime-planned arena (buffers with disjoint lifetimes share memory); 0: bump */
    qlt_arena_plan plans[QLT_GRAPH_PLANS];
    int plan_id;         /* the plan of the pass being recorded or run */
    int alloc_index;     /* allocations made so far in this pass */
    int64_t clock;       /* op counter of this pass (lifetimes are in these units) */
    char *arena;         /* backend memory */
    size_t arena_cap, arena_used, arena_peak;
    qlt_value *values;
    int n_values, cap_values;
    qlt_node *nodes;
    int n_nodes, cap_nodes;
    void *ckpt_grads[2]; /* gradient checkpointing: the two hidden-state gradient buffers layers take turns on */
};

/* reuse = 1: lifetime-planned arena; 0: every allocation of a pass gets its own bytes (bump). */
void qlt_graph_init(qlt_graph *g, qlt_backend *be, int reuse);
/* Starts a pass of plan QLT_PLAN_TRAIN (planning = 1 for the measuring pass). */
void qlt_graph_begin(qlt_graph *g, int planning);
void qlt_graph_begin_plan(qlt_graph *g, int planning, int plan_id);
/* After a planning pass: packs the plan and grows the arena to fit it (never shrinks: plans share it). */
int qlt_graph_commit_plan(qlt_graph *g);
/* During/after a planning pass: the arena bytes the pass needs (packed when lifetime-planned). */
size_t qlt_graph_planned_bytes(qlt_graph *g);
/* Lifetime bookkeeping while planning: every op calls qlt_graph_tick once, then touches each arena
 * buffer it reads or writes (other pointers are ignored). No-ops outside planning. */
void qlt_graph_tick(qlt_graph *g);
void qlt_graph_touch(qlt_graph *g, const void *p);
void qlt_graph_free(qlt_graph *g);

/* Arena allocation (256-byte aligned); fake non-NULL addresses while planning. */
void *qlt_graph_alloc(qlt_graph *g, size_t bytes);
/* A value of count act elements: fresh storage (data == NULL) or existing storage. Returns its index. */
int qlt_graph_value(qlt_graph *g, void *data, int64_t count, int needs_grad);
/* The gradient buffer of value v, allocated on first use (not zeroed). */
void *qlt_graph_grad(qlt_graph *g, int v);

/* ---- recorded ops; each returns the index of its output value ---- */
int qlt_ag_rmsnorm(qlt_graph *g, int x, const float *w, int64_t n, int64_t d, float eps);
/* y = x W^T (+ bias) (+ LoRA when lora != NULL) over n rows */
int qlt_ag_linear(qlt_graph *g, int x, const qlt_weight *w, const float *bias, const qlt_lora_ref *lora, int64_t n);
/* Projections of one input x: k <= QLT_STACK_MAX weights with the same cols, each with an optional bias
 * (unstacked only) and LoRA (lora[i] may be NULL).
 * stacked = 1: one output value [n, sum rows_i], one GEMM forward and one backward (gate+up);
 * stacked = 0: one output value per weight in outs[i], one GEMM each (q/k/v, read as separate tensors).
 * The adapters form one group: x.A^T, dA and the adapters' dx are one product each for all of them
 * (x read once), unless LoRA dropout is on (each adapter then has its own mask and runs alone). */
void qlt_ag_linear_group(qlt_graph *g, int x, int k, const qlt_weight *const *w, const float *const *bias,
                         const qlt_lora_ref *const *lora, int stacked, int64_t n, int *outs);
/* rotates x in place; the output value shares x's storage */
int qlt_ag_rope(qlt_graph *g, int x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim);
/* RoPE on the first rotary_dim dims of each head, cos / sin times attn_factor (Phi-3: partial rotary, LongRoPE);
 * be->rope_scaled runs it unless it is plain RoPE. */
int qlt_ag_rope_scaled(qlt_graph *g, int x, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                       int head_dim, int rotary_dim, float attn_factor);
int qlt_ag_attention(qlt_graph *g, int q, int k, int v, const int32_t *seg_start, int batch, int seq, int n_heads,
                     int n_kv_heads, int head_dim, float scale);
/* qlt_ag_attention with the scores soft-capped: softcap tanh(s / softcap) (Gemma 2; softcap 0: plain). */
int qlt_ag_attention_softcap(qlt_graph *g, int q, int k, int v, const int32_t *seg_start, int batch, int seq,
                             int n_heads, int n_kv_heads, int head_dim, float scale, float softcap);
/* Qwen3's per-head norm fused with RoPE: y = rope(rmsnorm(x) * w) on x [n, heads, head_dim]. */
int qlt_ag_head_norm_rope(qlt_graph *g, int x, const float *w, const int32_t *pos, const float *inv_freq, int64_t n,
                          int heads, int head_dim, float eps);
/* h [n, inter] = silu(gate) * up from gu [n, 2 inter] (the stacked gate+up output). The backward writes
 * gu's gradient over gu itself (its last reader). */
int qlt_ag_swiglu(qlt_graph *g, int gu, int64_t n, int64_t inter);
/* Gemma's GeGLU: h [n, inter] = gelu_tanh(gate) * up from gu [n, 2 inter], the backward as qlt_ag_swiglu's
 * (graph_geglu.c). */
int qlt_ag_geglu(qlt_graph *g, int gu, int64_t n, int64_t inter);
/* out = a + b. The backward hands out's gradient buffer to a and b instead of copying it whenever that
 * is safe (see graph_elementwise.c): the residual stream's gradient stays in one buffer. */
int qlt_ag_add(qlt_graph *g, int a, int b);
/* sum = a + b, then y = rmsnorm(sum) in one pass (fused forward; two nodes on the tape). Returns y,
 * *sum = the sum's value. */
int qlt_ag_add_rmsnorm(qlt_graph *g, int a, int b, const float *w, int64_t n, int64_t d, float eps, int *sum);
/* Records a node computed outside the tape (out already holds its value): its backward calls
 * `backward(g, node)`, which must write the gradients of node->in[] from node->out's. */
int qlt_ag_custom(qlt_graph *g, int in, int out, qlt_custom_backward backward, const void *ctx0, const void *ctx1,
                  const void *ctx2, const void *ctx3, int arg);

/* Marks the start of a phase for the backend's profiler (no-op unless profiling; skipped while planning). */
void qlt_graph_phase(qlt_graph *g, qlt_phase p);

/* Runs the recorded backward in reverse, starting from values whose grad is ready. */
void qlt_graph_backward(qlt_graph *g);

#endif
