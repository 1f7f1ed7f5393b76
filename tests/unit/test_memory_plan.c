/* test_memory_plan.c: the memory plan a run makes before loading (src/train/memory_plan.c). On the CPU backend,
 * whose plan has no library term, the plan is exactly the peak the run then reaches (peak_bytes after training
 * steps and an evaluation), over quantization, checkpointing and micro-batch; a run whose plan exceeds the free
 * memory (QLT_TEST_FREE_BYTES) is refused in one line before loading, with settings that fit, and the first
 * setting it names does fit. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "test_util.h"
#include "train/device.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

typedef struct plan_files {
    char *tmp, *train, *config;
} plan_files;

static plan_files plan_files_make(const char *extra) {
    plan_files f;
    f.tmp = test_tmpdir();
    cr_assert(asprintf(&f.train, "%s/train.jsonl", f.tmp) > 0);
    cr_assert(asprintf(&f.config, "%s/run.yaml", f.tmp) > 0);
    test_write_random_token_rows(f.train, 7, 16);
    char *tail = NULL;
    cr_assert(asprintf(&tail, "  max_steps: 2\n  log_every: 1\n%soutput:\n  dir: %s/out\n  overwrite: true\n", extra,
                       f.tmp) > 0);
    test_write_cpu_run_config(f.config, f.train, tail);
    free(tail);
    return f;
}

static void plan_files_free(plan_files *f) {
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "rm -rf %s", f->tmp) > 0);
    cr_assert(system(cmd) == 0);
    free(cmd), free(f->tmp), free(f->train), free(f->config);
}

static void load_config(qlt_config *cfg, const char *path, const char *const *sets, int n_sets) {
    qlt_config_defaults(cfg);
    cr_assert_eq(qlt_config_load_file(cfg, path), 0, "%s", qlt_error());
    for (int i = 0; i < n_sets; i++) cr_assert_eq(qlt_config_set(cfg, sets[i]), 0, "%s: %s", sets[i], qlt_error());
    cr_assert_eq(qlt_config_validate(cfg), 0, "%s", qlt_error());
}

/* The plan made before loading equals the peak the trainer then reaches: two steps and an evaluation. */
static void expect_plan_is_peak(const char *quant, const char *ckpt, const char *micro_batch, const char *eval_split) {
    plan_files f = plan_files_make("");
    char q[64], c[64], m[64], e[64];
    snprintf(q, sizeof q, "model.quant=%s", quant);
    snprintf(c, sizeof c, "train.grad_checkpoint=%s", ckpt);
    snprintf(m, sizeof m, "train.micro_batch=%s", micro_batch);
    snprintf(e, sizeof e, "data.eval_split=%s", eval_split);
    const char *sets[] = {q, c, m, e};
    qlt_config cfg;
    load_config(&cfg, f.config, sets, 4);
    qlt_trainer t;
    cr_assert_eq(qlt_trainer_init(&t, &cfg, QLT_TRAINER_TRAIN), 0, "%s", qlt_error());
    const qlt_memory_plan plan = t.mem_plan;
    cr_assert_gt(plan.total, 0, "the CPU backend plans");
    cr_expect_eq(plan.libraries, 0);
    qlt_step_metrics sm;
    for (int s = 0; s < 2; s++) cr_assert_eq(qlt_trainer_step(&t, &sm), 0, "%s", qlt_error());
    cr_assert_eq(qlt_trainer_flush(&t, &sm), 0, "%s", qlt_error());
    double loss;
    int64_t counted;
    if (t.eval.n_rows > 0) cr_assert_eq(qlt_trainer_evaluate(&t, &t.eval, &loss, &counted), 0, "%s", qlt_error());
    const double peak = (double)t.be->peak_bytes(t.be);
    cr_expect_eq(plan.total, peak,
                 "%s, %s, micro-batch %s, eval_split %s: planned %.0f bytes (weights %.0f, lora %.0f, activations %.0f, "
                 "buffers %.0f), the run's peak %.0f",
                 quant, ckpt, micro_batch, eval_split, plan.total, plan.weights, plan.lora, plan.activations,
                 plan.buffers, peak);
    cr_expect_eq(plan.checkpointing, strcmp(ckpt, "layer") == 0);
    qlt_trainer_free(&t);
    qlt_config_free(&cfg);
    plan_files_free(&f);
}

Test(memory_plan, equals_the_peak_dense, .timeout = QLT_TEST_TIMEOUT_S) {
    expect_plan_is_peak("none", "none", "2", "0");
    expect_plan_is_peak("none", "layer", "4", "0.25");
}

Test(memory_plan, equals_the_peak_nf4, .timeout = QLT_TEST_TIMEOUT_S) {
    expect_plan_is_peak("nf4", "none", "1", "0.25");
    expect_plan_is_peak("nf4", "layer", "2", "0");
}

/* The plan grows with the micro-batch and shrinks with checkpointing, and only in the activations and buffers. */
Test(memory_plan, follows_the_shape, .timeout = QLT_TEST_TIMEOUT_S) {
    plan_files f = plan_files_make("");
    qlt_config cfg;
    load_config(&cfg, f.config, NULL, 0);
    qlt_backend *be = qlt_device_backend_create(QLT_DEVICE_CPU, 1, 0);
    cr_assert(be, "%s", qlt_error());
    qlt_memory_plan small, big, ckpt;
    cr_assert_eq(qlt_memory_plan_make(&small, &cfg, be, 1, 1, 24, QLT_GRAD_CHECKPOINT_NONE), 0, "%s", qlt_error());
    cr_assert_eq(qlt_memory_plan_make(&big, &cfg, be, 1, 8, 24, QLT_GRAD_CHECKPOINT_NONE), 0, "%s", qlt_error());
    cr_assert_eq(qlt_memory_plan_make(&ckpt, &cfg, be, 1, 8, 24, QLT_GRAD_CHECKPOINT_LAYER), 0, "%s", qlt_error());
    cr_expect_eq(small.weights, big.weights);
    cr_expect_eq(small.lora, big.lora);
    cr_expect_gt(big.activations, 4 * small.activations, "%.0f vs %.0f", big.activations, small.activations);
    cr_expect_lt(ckpt.activations, big.activations);
    cr_expect_eq(ckpt.checkpointing, 1);
    cr_expect_eq(be->live_bytes(be), 0, "planning leaves nothing allocated");
    be->destroy(be);
    qlt_config_free(&cfg);
    plan_files_free(&f);
}

/* A run that does not fit is refused before loading, in one line naming what would fit; that setting fits. */
Test(memory_plan, refuses_what_does_not_fit, .timeout = QLT_TEST_TIMEOUT_S) {
    plan_files f = plan_files_make("");
    const char *sets[] = {"train.micro_batch=8", "train.grad_accum=1"};
    qlt_config cfg;
    load_config(&cfg, f.config, sets, 2);
    qlt_backend *be = qlt_device_backend_create(QLT_DEVICE_CPU, 1, 0);
    cr_assert(be, "%s", qlt_error());
    qlt_memory_plan none, layer;
    cr_assert_eq(qlt_memory_plan_make(&none, &cfg, be, 1, 8, 24, QLT_GRAD_CHECKPOINT_NONE), 0, "%s", qlt_error());
    cr_assert_eq(qlt_memory_plan_make(&layer, &cfg, be, 1, 8, 24, QLT_GRAD_CHECKPOINT_LAYER), 0, "%s", qlt_error());
    be->destroy(be);
    cr_assert_lt(layer.total, none.total);
    /* room for the checkpointed run, not for the plain one */
    long long room = (long long)((layer.total + none.total) / 2);
    char room_text[32], *cmd = NULL, *out = NULL;
    snprintf(room_text, sizeof room_text, "%lld", room);
    setenv("QLT_TEST_FREE_BYTES", room_text, 1);
    cr_assert(asprintf(&cmd, "train --config %s --set train.micro_batch=8 --set train.grad_accum=1", f.config) > 0);
    int rc = test_run_cli(NULL, cmd, &out);
    cr_expect_neq(rc, 0, "%s", out);
    const char *line = strstr(out, "does not fit in the memory of");
    cr_expect(line && strstr(line, "--set train.grad_checkpoint=layer"), "the refusal names what fits: %s", out);
    cr_expect(line && !strstr(line + 1, "does not fit") && strchr(line, '\n') && strchr(line, '\n')[1] == '\0',
              "one line, the last: %s", out);
    cr_expect(!strstr(out, "model loaded"), "refused before loading: %s", out);
    free(cmd), free(out);
    /* the setting it named fits */
    cr_assert(asprintf(&cmd, "train --config %s --set train.micro_batch=8 --set train.grad_accum=1 --set "
                             "train.grad_checkpoint=layer", f.config) > 0);
    rc = test_run_cli(NULL, cmd, &out);
    cr_expect_eq(rc, 0, "%s", out);
    unsetenv("QLT_TEST_FREE_BYTES");
    free(cmd), free(out);
    qlt_config_free(&cfg);
    plan_files_free(&f);
}
