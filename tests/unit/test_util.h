/* test_util.h: shared helpers for the Criterion tests: fixture paths, golden tensors, error metrics,
 * temporary directories and running the built CLI. */
#ifndef QLT_TEST_UTIL_H
#define QLT_TEST_UTIL_H

#include <stdint.h>

#include "io/safetensors.h"

/* QLT_TEST_DATA "/fixtures/<name>" (static buffer per call site is not needed: heap, caller frees) */
char *test_fixture_path(const char *name, const char *file);
/* Reads an I64 tensor as int32 (heap). */
int32_t *test_read_i32(const qlt_st_file *f, const char *name, int64_t *numel);
/* Reads a float tensor as float32 (heap). */
float *test_read_f32(const qlt_st_file *f, const char *name, int64_t *numel);
/* max |a - ref| / max |ref| (NaN-safe: returns INFINITY on NaN). */
double test_rel_err(const float *a, const float *ref, int64_t n);
/* mkdtemp under /tmp; heap path. */
char *test_tmpdir(void);
/* Runs QLT_BINARY with args through sh; captures stdout+stderr into *output (heap); returns exit status. */
int test_run_cli(const char *args, char **output);
/* Writes text to path (test setup). */
void test_write_text(const char *path, const char *text);

#endif
