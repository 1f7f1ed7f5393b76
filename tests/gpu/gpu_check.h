/* gpu_check.h: the GPU verification harness (no Criterion on the GPU machine: a plain executable).
 * Each tests/gpu/check_<area>.c defines checks that compare a CUDA op against the CPU reference on
 * random non-zero inputs (outputs poisoned first), or time a kernel; each check reports rows into
 * the table printed last by qlt_gpu_check. Checks are listed in tests/gpu/gpu_check_main.c. */
#ifndef QLT_GPU_CHECK_H
#define QLT_GPU_CHECK_H

#include <stdint.h>

/* One row of the results table. metric is an error (with tolerance) or a rate (tolerance < 0). */
void gpu_check_row(const char *name, const char *shape, double metric, double tolerance, const char *unit);
/* Rows whose metric is a performance figure, not compared against a tolerance. */
void gpu_check_perf(const char *name, const char *shape, double value, const char *unit);
/* Marks the run failed with a message (e.g. CUDA error). */
void gpu_check_fail(const char *name, const char *why);

/* Deterministic random helpers for checks. */
typedef struct gpu_rng { uint64_t s; } gpu_rng;
float gpu_rng_normal(gpu_rng *r);
float gpu_rng_uniform(gpu_rng *r); /* [0, 1) */

/* Seconds on the monotonic clock (for the timing rows). */
double gpu_check_now_s(void);

/* Max |a - b| / max(max |b|, tiny): relative to the reference tensor's scale. */
double gpu_rel_err(const float *a, const float *ref, int64_t n);

typedef void (*gpu_check_fn)(void);

#endif
