/* test_cli_inputs.c: every input file is checked before the model loads (a missing tokenizer fails at once,
 * naming the file); data.skip_bad names the lines it skips; data of another format says which data.format fits. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fileutil.h"
#include "test_cli_util.h"
#include "test_util.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(cli_inputs, missing_tokenizer_fails_before_the_model_loads) {
    char *dir = cli_tiny_dir(8, NULL), *args = NULL, *out = NULL;
    /* a real model directory (weights to load) without a tokenizer.json beside it */
    if (asprintf(&args, "train --config %s/run.yaml --set model.path=%s/fixtures/tiny-llama --set train.max_steps=1",
                 dir, QLT_TEST_DATA) < 0)
        abort();
    double start = now();
    int rc = cli_run(args, &out);
    double seconds = now() - start;
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "qlora-train: error: data.tokenizer: " QLT_TEST_DATA "/fixtures/tiny-llama/tokenizer.json: "
                          "No such file or directory"),
              "%s", out);
    cr_expect(!strstr(out, "model loaded"), "the model was loaded first: %s", out);
    cr_expect(seconds < 10.0, "%.2f s: the check runs before the model loads", seconds);
    free(args);
    free(out);
    /* data.tokenizer named but missing; a data file missing */
    if (asprintf(&args, "eval --config %s/run.yaml --set data.tokenizer=%s/none.json", dir, dir) < 0) abort();
    cr_expect_eq(cli_run(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "data.tokenizer: ") && strstr(out, "/none.json: No such file"), "%s", out);
    free(args);
    free(out);
    if (asprintf(&args, "train --config %s/run.yaml --set data.eval=%s/missing.jsonl", dir, dir) < 0) abort();
    cr_expect_eq(cli_run(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "error: data.eval: ") && strstr(out, "/missing.jsonl: No such file"), "%s", out);
    cr_expect(!strstr(out, "model loaded"), "%s", out);
    free(args);
    free(out);
    qlt_remove_tree(dir);
    free(dir);
}

Test(cli_inputs, skip_bad_names_the_skipped_lines) {
    char *dir = cli_tiny_dir(0, NULL), *data = cli_path(dir, "train.jsonl"), *args = NULL, *out = NULL;
    FILE *f = fopen(data, "w");
    cr_assert(f);
    for (int i = 1; i <= 30; i++) { /* lines 3, 6, ..., 24: eight bad ones */
        if (i % 3 == 0 && i <= 24) fprintf(f, "{\"text\": 17}\n");
        else fprintf(f, "{\"text\": \"good line %d of the data set, long enough to matter\"}\n", i);
    }
    fclose(f);
    if (asprintf(&args, "train --config %s/run.yaml --set data.skip_bad=true --dry-run", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 0, "%s", out);
    char first[512], sixth[512];
    snprintf(first, sizeof first, "qlora-train: data.skip_bad: skipped %s:3: field \"text\" must be a string", data);
    snprintf(sixth, sizeof sixth, "skipped %s:18:", data);
    cr_expect(strstr(out, first), "'%s' missing: %s", first, out);
    cr_expect_eq(cli_count(out, "qlora-train: data.skip_bad: skipped "), 5, "the first five: %s", out);
    cr_expect(!strstr(out, sixth), "only the first five are named: %s", out);
    cr_expect(strstr(out, "qlora-train: data.skip_bad: 8 bad lines skipped in "), "the count: %s", out);
    free(args);
    free(out);
    free(data);
    qlt_remove_tree(dir);
    free(dir);
}

Test(cli_inputs, format_mismatch_says_which_format_fits) {
    char *dir = cli_tiny_dir(8, NULL), *args = NULL, *out = NULL;
    if (asprintf(&args, "train --config %s/run.yaml --set data.format=chat", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "train.jsonl:1: missing field \"messages\"; the line has key \"text\": use data.format: text"),
              "%s", out);
    free(args);
    free(out);
    char *data = cli_path(dir, "train.jsonl");
    test_write_text(data, "{\"instruction\": \"Say hi\", \"input\": \"\", \"output\": \"hi\"}\n");
    if (asprintf(&args, "train --config %s/run.yaml", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "missing field \"text\"; the line has keys \"instruction\", \"input\", \"output\": use "
                          "data.format: alpaca"),
              "%s", out);
    free(args);
    free(out);
    test_write_text(data, "{\"body\": \"x\"}\n");
    if (asprintf(&args, "train --config %s/run.yaml", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "missing field \"text\"; the line has key \"body\""), "no format fits: %s", out);
    free(args);
    free(out);
    free(data);
    qlt_remove_tree(dir);
    free(dir);
}
