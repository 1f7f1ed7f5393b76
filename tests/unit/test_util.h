/* test_util.h: shared helpers for the Criterion tests: fixture paths, golden tensors and the golden batch,
 * error metrics, the LoRA-gradient check, temporary directories, writing files and running the built CLI. */
#ifndef QLT_TEST_UTIL_H
#define QLT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"
#include "model/lora.h"

/* QLT_TEST_DATA "/fixtures/<name>" (static buffer per call site is not needed: heap, caller frees) */
/* The one time limit of the tests that set one. Criterion 2.4.1's runner loses a 48-byte timeout record when
 * tests with different limits run side by side, and LeakSanitizer then fails the whole run at exit after every test
 * passed; with a single value it does not. */
#define QLT_TEST_TIMEOUT_S 600

char *test_fixture_path(const char *name, const char *file);
/* Reads an I64 tensor as int32 (heap). */
int32_t *test_read_i32(const qlt_st_file *f, const char *name, int64_t *numel);
/* Reads a float tensor as float32 (heap). */
float *test_read_f32(const qlt_st_file *f, const char *name, int64_t *numel);
/* The golden batch of fixture `name` (golden.safetensors: input_ids and labels, both I64 [batch, seq]):
 * *ids and *labels get int32 [batch * seq], row-major (heap, caller frees; pass NULL for one not wanted);
 * *batch and *seq the shape (either may be NULL). */
void test_golden_batch(const char *name, int32_t **ids, int32_t **labels, int *batch, int *seq);
/* Writes the golden batch of fixture `name` to path as a data.format=tokens JSONL file: one line a row,
 * {"input_ids": [seq ints], "labels": [seq ints]}; returns its shape in *batch, *seq (either may be NULL). */
void test_write_golden_tokens(const char *name, const char *path, int *batch, int *seq);
/* max |a - ref| / max |ref| (NaN-safe: returns INFINITY on NaN). */
double test_rel_err(const float *a, const float *ref, int64_t n);
/* Checks every LoRA gradient of `lora` (A [r, in] and B [out, r] of every layer and projection; every slot
 * must be active) against the golden's grad.<PEFT tensor name>, which must have the same numel: expects
 * max |err| <= tol * max |golden| per tensor. `what` prefixes the failure messages (may be ""). */
void test_check_lora_grads(const qlt_lora *lora, const qlt_st_file *golden, double tol, const char *what);
/* Uniform in [-1, 1) from an LCG whose state is *state: the tests' random inputs, the same every run. */
float test_noise(unsigned *state);
/* n values scale * test_noise(state) (heap). */
float *test_random_floats(unsigned *state, int64_t n, float scale);
/* A heap copy of n floats. */
float *test_copy_floats(const float *x, int64_t n);
/* mkdtemp under /tmp; heap path. */
char *test_tmpdir(void);
/* Runs QLT_BINARY with args through sh (so args may hold redirections), in directory cwd when not NULL;
 * captures stdout+stderr into *output (heap; NULL: discarded); returns the exit status (128 if killed). */
int test_run_cli(const char *cwd, const char *args, char **output);
/* Writes len bytes of data to path (test setup; data may hold NULs). */
void test_write_bytes(const char *path, const void *data, size_t len);
/* Writes text to path (test setup). */
void test_write_text(const char *path, const char *text);
/* rows lines of {"input_ids": [24 ids < 512]} (the tiny fixtures' vocabulary) from an LCG seeded with seed: the
 * `tokens` format's rows for small CPU runs, the same for the same seed. */
void test_write_random_token_rows(const char *path, uint64_t seed, int rows);
/* path: a run config of tiny-qwen3 (dense, r 4, alpha 8, dropout 0.1) on the CPU, one thread (the same bits every
 * run), over train (a `tokens` file of 24-token rows), lr 3e-2 constant, micro-batch 2, grad_accum 2, then tail:
 * more YAML that goes on in the train section (e.g. "  log_every: 1\noutput:\n  save_every: 1\n"). */
void test_write_cpu_run_config(const char *path, const char *train, const char *tail);

#endif
