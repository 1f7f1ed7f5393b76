/* gpu_check_main.c: runs every GPU check (or those whose name contains argv[1]) and prints the
 * results table last; exit status 1 if any row failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "gpu_check.h"

/* ---- the list of checks: one line per check function ---- */
#define GPU_CHECKS(X) /* X(name, function) */ \
    X("embed", check_embed)                   \
    X("rmsnorm", check_rmsnorm)               \
    X("rope", check_rope)                     \
    X("elementwise", check_elementwise)       \
    X("swiglu", check_swiglu)                 \
    X("fused_norms", check_fused_norms)       \
    X("linear", check_linear)                 \
    X("weight_stack", check_linear_stack)     \
    X("lora", check_lora)                     \
    X("adapter_fold", check_linear_lora)      \
    X("attention", check_attention)           \
    X("generation", check_generation)         \
    X("lm_head_loss", check_lm_head_loss)     \
    X("optimizer", check_optimizer)           \
    X("graph_capture", check_graph_capture)   \
    X("perf", check_perf)                     \
    X("nf4_rcp", check_nf4_rcp)               \
    X("nf4_quantize", check_nf4_quantize)     \
    X("nf4_bandwidth", check_nf4_bandwidth)   \
    X("nf4_bnb", check_nf4_bnb)               \
    X("nf4_bnb_ckpt", check_nf4_bnb_ckpt)     \
    X("energy", check_energy)

#define DECLARE(name, fn) void fn(void);
GPU_CHECKS(DECLARE)

static const struct {
    const char *name;
    gpu_check_fn fn;
} checks[] = {
#define ENTRY(name, fn) {name, fn},
    GPU_CHECKS(ENTRY){NULL, NULL},
};

typedef struct row {
    char name[64], shape[64], unit[16];
    double metric, tolerance;
    int is_perf, failed;
    char why[160];
} row;

static row rows[1024];
static int n_rows, n_failed;

static row *next_row(void) {
    if (n_rows == (int)(sizeof rows / sizeof rows[0])) {
        fprintf(stderr, "gpu_check: too many rows\n");
        exit(2);
    }
    return &rows[n_rows++];
}

void gpu_check_row(const char *name, const char *shape, double metric, double tolerance, const char *unit) {
    row *r = next_row();
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->metric = metric;
    r->tolerance = tolerance;
    r->failed = !(metric <= tolerance); /* NaN fails */
    n_failed += r->failed;
    printf("%-28s %-28s %.3e (tol %.1e) %s\n", name, shape, metric, tolerance, r->failed ? "FAIL" : "ok");
    fflush(stdout);
}

void gpu_check_perf(const char *name, const char *shape, double value, const char *unit) {
    row *r = next_row();
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->metric = value;
    r->is_perf = 1;
    printf("%-28s %-28s %.4g %s\n", name, shape, value, unit);
    fflush(stdout);
}

void gpu_check_fail(const char *name, const char *why) {
    row *r = next_row();
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->why, sizeof r->why, "%s", why);
    r->failed = 1;
    n_failed++;
    printf("%-28s FAIL: %s\n", name, why);
    fflush(stdout);
}

float gpu_rng_uniform(gpu_rng *r) {
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((r->s >> 40) * (1.0 / 16777216.0));
}

float gpu_rng_normal(gpu_rng *r) {
    float u1 = gpu_rng_uniform(r), u2 = gpu_rng_uniform(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307f * u2);
}

double gpu_check_now_s(void) { return qlt_now_seconds(); }

double gpu_rel_err(const float *a, const float *ref, int64_t n) {
    double scale = 0, err = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (!(d == d)) return NAN;
        if (d > err) err = d;
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    return err / (scale > 1e-30 ? scale : 1e-30);
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : "";
    for (int i = 0; checks[i].name; i++)
        if (strstr(checks[i].name, filter)) checks[i].fn();
    printf("\n| check | shape | result | tolerance / unit | status |\n|---|---|---|---|---|\n");
    for (int i = 0; i < n_rows; i++) {
        row *r = &rows[i];
        if (r->why[0])
            printf("| %s | | | | FAIL: %s |\n", r->name, r->why);
        else if (r->is_perf)
            printf("| %s | %s | %.4g | %s | perf |\n", r->name, r->shape, r->metric, r->unit);
        else
            printf("| %s | %s | %.3e | %.1e %s | %s |\n", r->name, r->shape, r->metric, r->tolerance, r->unit,
                   r->failed ? "FAIL" : "pass");
    }
    printf("\ngpu_check: %d rows, %d failed\n", n_rows, n_failed);
    return n_failed ? 1 : 0;
}
