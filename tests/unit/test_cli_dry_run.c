/* test_cli_dry_run.c: `train --dry-run` prints the resolved configuration with where each value came from (file
 * and line, --set, environment, default), the data, the memory plan and one step's time, and writes nothing. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileutil.h"
#include "test_cli_util.h"
#include "test_util.h"

/* The line of the dry run's config listing for `key`, up to its end (heap), or NULL. */
static char *key_line(const char *out, const char *key) {
    char needle[96];
    snprintf(needle, sizeof needle, "\n  %s ", key);
    const char *p = strstr(out, needle);
    if (!p) return NULL;
    p += 1;
    const char *end = strchr(p, '\n');
    return strndup(p, end ? (size_t)(end - p) : strlen(p));
}

Test(cli_dry_run, reports_config_sources_data_memory_and_writes_nothing) {
    char *dir = cli_tiny_dir(40, NULL), *args = NULL, *out = NULL;
    setenv("CUDA_GRAPH", "Yes", 1);
    if (asprintf(&args, "train --config %s/run.yaml --set train.micro_batch=4 --dry-run", dir) < 0) abort();
    int rc = cli_run(args, &out);
    cr_assert_eq(rc, 0, "%s", out);
    char *lr = key_line(out, "train.lr"), *mb = key_line(out, "train.micro_batch"), *seed = key_line(out, "train.seed");
    char *graph = key_line(out, "train.cuda_graph"), *where = NULL;
    if (asprintf(&where, "# %s/run.yaml:9", dir) < 0) abort();
    cr_assert(lr && strstr(lr, "0.001") && strstr(lr, where), "train.lr from the file's line 9: %s", out);
    cr_assert(mb && strstr(mb, " 4 ") && strstr(mb, "# --set"), "train.micro_batch from --set: %s", out);
    cr_assert(seed && strstr(seed, "42") && strstr(seed, "# default"), "train.seed: the default: %s", out);
    cr_assert(graph && strstr(graph, "true") && strstr(graph, "# environment variable CUDA_GRAPH"), "%s", out);
    cr_expect(strstr(out, "  train 40 examples -> "), "the data: %s", out);
    cr_expect(strstr(out, "examples truncated") && strstr(out, "packing efficiency"), "%s", out);
    cr_expect(strstr(out, "weights (frozen, NF4)") && strstr(out, "LoRA + AdamW state") &&
                  strstr(out, "activations (") && strstr(out, "  total "),
              "the memory plan: %s", out);
    cr_expect(strstr(out, "step time: ") && strstr(out, "one step timed on the cpu backend"), "%s", out);
    char *run = cli_path(dir, "run");
    cr_expect(!qlt_dir_exists(run) && !qlt_file_exists(run), "the dry run wrote %s: %s", run, out);
    free(run);
    free(where);
    free(lr);
    free(mb);
    free(seed);
    free(graph);
    free(args);
    free(out);
    qlt_remove_tree(dir);
    free(dir);
}

/* The packing efficiency is the real tokens over the row slots: unpacked short lines leave most slots empty. */
Test(cli_dry_run, packing_efficiency_counts_padding) {
    char *dir = cli_tiny_dir(10, NULL), *args = NULL, *out = NULL;
    if (asprintf(&args, "train --config %s/run.yaml --set data.packing=false --set data.seq_len=128 --dry-run", dir) < 0)
        abort();
    cr_assert_eq(cli_run(args, &out), 0, "%s", out);
    const char *eff = strstr(out, "packing efficiency ");
    cr_assert(eff, "%s", out);
    double pct = atof(eff + strlen("packing efficiency "));
    cr_expect(pct > 5 && pct < 50, "10 short lines, one a 128-token row: %g%% (%s)", pct, out);
    free(args);
    free(out);
    qlt_remove_tree(dir);
    free(dir);
}

/* configs/demo.yaml does not set output.overwrite (a copy of it must not delete an earlier run's checkpoints),
 * and the README's demo command (which adds --set output.overwrite=true) runs twice into the same directory. */
Test(cli_dry_run, demo_runs_twice_without_overwrite_in_the_file) {
    char *text = NULL;
    cr_assert_eq(qlt_read_file(QLT_TEST_DATA "/../../configs/demo.yaml", &text, NULL), 0);
    cr_expect(!strstr(text, "\n  overwrite:"), "configs/demo.yaml sets output.overwrite");
    free(text);
    cr_assert_eq(qlt_read_file(QLT_TEST_DATA "/../../README.md", &text, NULL), 0);
    const char *command = "build/qlora-train train --config configs/demo.yaml --set output.overwrite=true";
    cr_expect(strstr(text, command), "the README's demo command is not `%s`", command);
    free(text);
    char *tmp = test_tmpdir(), *args = NULL, *out = NULL;
    /* the README's command, kept short: the random demo model, two steps, a fresh output.dir */
    if (asprintf(&args, "%s --set model.path=random:examples/demo-model/config.json --set train.device=cpu "
                 "--set train.max_steps=2 --set output.dir=%s/run --set output.sample_prompt= --set data.seq_len=64",
                 command + strlen("build/qlora-train "), tmp) < 0)
        abort();
    for (int run = 0; run < 2; run++) {
        cr_assert_eq(cli_run(args, &out), 0, "run %d: %s", run + 1, out);
        free(out);
    }
    free(args);
    qlt_remove_tree(tmp);
    free(tmp);
}
