/* test_graph_ops.c: the tape's table of node kinds (src/autograd/graph_internal.h). Every kind has an entry
 * with a name and a backward; the facts the core reads from the entries (a node's outputs, the values its
 * backward may read) hold for recorded nodes; and a linear group with one output per weight runs its
 * backward when any of its outputs, not only the first, has a gradient. All checks are exact (no tolerance):
 * they record nodes in a planning pass, where no op runs. */
#include <criterion/criterion.h>
#include <string.h>

#include "autograd/graph.h"
#include "autograd/graph_internal.h"
#include "backend/backend.h"
#include "cpu/backend_cpu.h"

Test(graph_ops, every_kind_has_a_complete_entry) {
    for (int kind = 0; kind < QLT_NODE_KIND_COUNT; kind++) {
        const qlt_node_ops *ops = qlt_node_ops_of((qlt_node_kind)kind);
        cr_assert(ops, "node kind %d has no entry in graph.c's table", kind);
        cr_expect(ops->name && ops->name[0], "node kind %d has no name", kind);
        cr_expect(ops->backward, "node kind %d (%s) has no backward", kind, ops->name);
        for (int other = 0; other < kind; other++)
            cr_expect(qlt_node_ops_of((qlt_node_kind)other) != ops &&
                          strcmp(qlt_node_ops_of((qlt_node_kind)other)->name, ops->name) != 0,
                      "node kinds %d and %d share the entry or name %s", other, kind, ops->name);
    }
    cr_expect_null(qlt_node_ops_of(QLT_NODE_KIND_COUNT));
    cr_expect_null(qlt_node_ops_of((qlt_node_kind)-1));
}

/* A weight of rows x cols for recording only (planning passes never read its data). */
static qlt_weight shape_only(int64_t rows, int64_t cols) {
    qlt_weight w;
    memset(&w, 0, sizeof w);
    w.format = QLT_WFORMAT_F32;
    w.rows = rows;
    w.cols = cols;
    return w;
}

static void no_backward(qlt_graph *g, const qlt_node *node) {
    (void)g;
    (void)node;
}

Test(graph_ops, outputs_and_reads_of_recorded_nodes) {
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    cr_assert(be);
    const int64_t n = 2, d = 8;
    qlt_weight wq = shape_only(8, d), wk = shape_only(4, d), wv = shape_only(4, d);
    const qlt_weight *qkv_w[3] = {&wq, &wk, &wv};
    const float *no_bias[3] = {NULL, NULL, NULL};
    const qlt_lora_ref *no_lora[3] = {NULL, NULL, NULL};
    float norm_w[8] = {0};
    qlt_graph g;
    qlt_graph_init(&g, be, 0);
    qlt_graph_begin(&g, 1);
    int x = qlt_graph_value(&g, NULL, n * d, 1), other = qlt_graph_value(&g, NULL, n * d, 1);
    int qkv[3], gu;
    qlt_ag_linear_group(&g, x, 3, qkv_w, no_bias, no_lora, 0, n, qkv); /* node 0: three outputs */
    qlt_ag_linear_group(&g, x, 2, qkv_w + 1, NULL, no_lora, 1, n, &gu); /* node 1: one stacked output */
    int y = qlt_ag_rmsnorm(&g, x, norm_w, n, d, 1e-6f);                  /* node 2 */
    int c = qlt_ag_custom(&g, y, other, no_backward, NULL, NULL, NULL, NULL, 0); /* node 3 */
    cr_assert_eq(g.n_nodes, 4);
    const qlt_node *unstacked = &g.nodes[0], *stacked = &g.nodes[1], *norm = &g.nodes[2], *custom = &g.nodes[3];
    for (int i = 0; i < 3; i++) cr_expect(qlt_node_has_output(unstacked, qkv[i]), "q/k/v output %d not listed", i);
    cr_expect(!qlt_node_has_output(unstacked, x));
    cr_expect(!qlt_node_has_output(unstacked, gu));
    cr_expect(qlt_node_has_output(stacked, gu));
    cr_expect(!qlt_node_has_output(stacked, qkv[1]));
    cr_expect(qlt_node_has_output(norm, y));
    cr_expect(!qlt_node_has_output(norm, x));
    cr_expect(qlt_node_has_output(custom, c));
    cr_expect(qlt_node_may_read(unstacked, x));
    cr_expect(!qlt_node_may_read(unstacked, qkv[0]));
    cr_expect(qlt_node_may_read(norm, x));
    cr_expect(!qlt_node_may_read(norm, other));
    cr_expect(qlt_node_may_read(custom, x), "a custom node's backward may read any value");
    qlt_graph_free(&g);
    be->destroy(be);
}

Test(graph_ops, a_linear_group_runs_its_backward_from_any_output) {
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    cr_assert(be);
    const int64_t n = 2, d = 8;
    qlt_weight wq = shape_only(8, d), wk = shape_only(4, d), wv = shape_only(4, d);
    const qlt_weight *qkv_w[3] = {&wq, &wk, &wv};
    const qlt_lora_ref *no_lora[3] = {NULL, NULL, NULL};
    qlt_graph g;
    qlt_graph_init(&g, be, 0);
    qlt_graph_begin(&g, 1);
    int x = qlt_graph_value(&g, NULL, n * d, 1);
    int qkv[3];
    qlt_ag_linear_group(&g, x, 3, qkv_w, NULL, no_lora, 0, n, qkv);
    qlt_graph_grad(&g, qkv[2]); /* only v's output has a gradient */
    g.values[qkv[2]].grad_ready = 1;
    qlt_graph_backward(&g);
    cr_expect(g.values[x].grad_ready, "the q/k/v group's backward did not run for a gradient on v alone");
    cr_expect_eq(g.clock, 2, "one tick recording, one for the backward: got %lld", (long long)g.clock);
    qlt_graph_free(&g);
    be->destroy(be);
}
