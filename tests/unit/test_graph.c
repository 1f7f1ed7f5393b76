/* test_graph.c: the autograd tape's buffer sharing. The backward of an add hands its output gradient to its
 * inputs instead of copying it when that is safe; y = a + f(a) is the case where it is not (f's backward
 * accumulates into a's gradient while reading y's), checked here against the gradient by hand. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "autograd/graph.h"
#include "backend/backend.h"
#include "cpu/backend_cpu.h"

/* y [n, d] = a + a W^T with dy fixed; returns a's value index */
static int build_residual_of_linear(qlt_graph *g, const qlt_weight *w, float *a_data, int64_t n, int64_t d) {
    int a = qlt_graph_value(g, a_data, n * d, 1);
    int b = qlt_ag_linear(g, a, w, NULL, NULL, n);
    int y = qlt_ag_add(g, a, b);
    float *dy = qlt_graph_grad(g, y);
    g->values[y].grad_ready = 1;
    if (!g->planning)
        for (int64_t i = 0; i < n * d; i++) dy[i] = 1.0f + 0.01f * (float)(i % 7);
    qlt_graph_backward(g);
    return a;
}

Test(graph, add_of_a_linear_of_its_own_first_input) {
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    cr_assert(be);
    const int64_t n = 3, d = 300; /* d > 256: the CPU GEMM works in column chunks, so aliasing shows */
    float *w_data = malloc(sizeof(float) * (size_t)(d * d)), *a_data = malloc(sizeof(float) * (size_t)(n * d));
    for (int64_t i = 0; i < d * d; i++) w_data[i] = (float)((i * 37 % 101) - 50) / 500.0f;
    for (int64_t i = 0; i < n * d; i++) a_data[i] = 0.5f + 0.001f * (float)i;
    qlt_weight w;
    cr_assert_eq(be->weight_create(be, &w, w_data, QLT_DTYPE_F32, d, d, 0, 0), 0);
    qlt_graph g;
    qlt_graph_init(&g, be, 0);
    qlt_graph_begin(&g, 1);
    build_residual_of_linear(&g, &w, a_data, n, d);
    qlt_graph_commit_plan(&g);
    qlt_graph_begin(&g, 0);
    int a = build_residual_of_linear(&g, &w, a_data, n, d);
    const float *ga = g.values[a].grad;
    double worst = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < d; j++) {
            double want = 1.0 + 0.01 * (double)((t * d + j) % 7); /* da = dy + dy W */
            for (int64_t p = 0; p < d; p++) want += (1.0 + 0.01 * (double)((t * d + p) % 7)) * w_data[p * d + j];
            worst = fmax(worst, fabs(want - ga[t * d + j]));
        }
    cr_expect_lt(worst, 1e-3, "a.grad differs from dy + dy W by %g", worst);
    qlt_graph_free(&g);
    be->weight_free(be, &w);
    be->destroy(be);
    free(w_data);
    free(a_data);
}
