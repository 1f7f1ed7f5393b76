/* graph_internal.h: what the tape core (graph.c) and the files of recorded ops share. Each op file holds its
 * ops' recording functions (qlt_ag_*) with their backwards beside them, and one qlt_node_ops entry per node
 * kind it records: graph_norm.c (rmsnorm, add + rmsnorm, head norm + rope), graph_linear.c (the linear
 * group and its LoRA sites), graph_attention.c (rope, attention), graph_elementwise.c (swiglu, add, custom).
 * The core finds a node's entry by its kind (qlt_node_ops_of) and never switches on the kind. */
#ifndef QLT_GRAPH_INTERNAL_H
#define QLT_GRAPH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "autograd/graph.h"

/* What the tape core knows of one node kind. */
typedef struct qlt_node_ops {
    const char *name;
    /* Writes (first contribution) or accumulates the gradients of node->in[] from the outputs' gradients.
     * Called by the backward loop after it ticked the clock, only when one of the outputs has a gradient. */
    void (*backward)(qlt_graph *g, const qlt_node *node);
    /* The node's output values into outs [QLT_STACK_MAX]; returns how many (outs[0] is node->out).
     * NULL: node->out is the only one. */
    int (*outputs)(const qlt_node *node, int *outs);
    /* Touches the buffers the node saved for its backward (rstd, lse, u ...) beyond its inputs and outputs,
     * so that planning keeps them alive until the backward ran. NULL: none. */
    void (*touch_saved)(qlt_graph *g, const qlt_node *node);
    /* 1: the backward may read values other than node->in[] (code the tape does not see: custom). */
    int reads_any;
} qlt_node_ops;

/* One entry per kind, each defined beside its recording function. */
extern const qlt_node_ops qlt_node_rmsnorm;        /* graph_norm.c */
extern const qlt_node_ops qlt_node_head_norm_rope; /* graph_norm.c */
extern const qlt_node_ops qlt_node_linear;         /* graph_linear.c */
extern const qlt_node_ops qlt_node_rope;           /* graph_attention.c */
extern const qlt_node_ops qlt_node_attention;      /* graph_attention.c */
extern const qlt_node_ops qlt_node_swiglu;         /* graph_elementwise.c */
extern const qlt_node_ops qlt_node_add;            /* graph_elementwise.c */
extern const qlt_node_ops qlt_node_custom;         /* graph_elementwise.c */
extern const qlt_node_ops qlt_node_geglu;          /* graph_geglu.c */

/* The entry of a kind; NULL for a value outside [0, QLT_NODE_KIND_COUNT). */
const qlt_node_ops *qlt_node_ops_of(qlt_node_kind kind);

/* ---- tape core helpers for the op files (graph.c) ---- */

/* Appends a node of this kind (inputs -1, payload zeroed); the caller fills it. */
qlt_node *qlt_graph_push_node(qlt_graph *g, qlt_node_kind kind);
/* Bytes of count act elements. */
size_t qlt_graph_act_bytes(const qlt_graph *g, int64_t count);
/* Beta for accumulating into value v's gradient (0: first contribution); allocates the gradient on first
 * use and marks it ready. */
float qlt_graph_grad_beta(qlt_graph *g, int v);
/* Whether value v is one of node's outputs. */
int qlt_node_has_output(const qlt_node *node, int v);
/* Whether node's backward may read value v: one of its inputs, or any value when its kind says so. */
int qlt_node_may_read(const qlt_node *node, int v);

/* Inside a recording function or a backward (g in scope): whether ops run (not a planning pass), and the
 * lifetime bookkeeping of an arena buffer read or written at this clock. */
#define RUN (!g->planning)
#define TOUCH(p) qlt_graph_touch(g, (p))

#endif
