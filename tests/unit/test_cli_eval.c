/* test_cli_eval.c: `eval` scores the data training evaluates on (the data.eval_split rows held out of data.train,
 * not all of it), takes the adapter as a plain argument or --adapter, and shows progress on long evaluations. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileutil.h"
#include "test_cli_util.h"

/* The integer after `"key": ` in text, or -1. */
static long long json_int(const char *text, const char *key) {
    char needle[64];
    snprintf(needle, sizeof needle, "\"%s\": ", key);
    const char *p = strstr(text, needle);
    return p ? atoll(p + strlen(needle)) : -1;
}

/* The JSON line eval printed (its last line starting with '{'). */
static const char *eval_line(const char *out) {
    const char *line = NULL;
    for (const char *p = out; p; p = strchr(p, '\n')) {
        if (*p == '\n') p++;
        if (*p == '{') line = p;
        if (!*p) break;
    }
    return line;
}

Test(cli_eval, scores_the_eval_split_rows_training_holds_out) {
    char *dir = cli_tiny_dir(60, NULL), *args = NULL, *out = NULL, *metrics = NULL;
    if (asprintf(&args, "eval --config %s/run.yaml", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 0, "%s", out);
    long long all_rows = json_int(eval_line(out), "rows");
    free(args);
    free(out);
    if (asprintf(&args, "eval --config %s/run.yaml --set data.eval_split=0.25", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 0, "%s", out);
    const char *line = eval_line(out);
    cr_assert(line, "%s", out);
    long long rows = json_int(line, "rows"), tokens = json_int(line, "tokens");
    cr_expect_eq(rows, (long long)(0.25 * (double)all_rows), "a quarter of %lld rows: %s", all_rows, out);
    free(args);
    free(out);
    /* training with the same split evaluates the same rows: the same number of scored tokens */
    if (asprintf(&args, "train --config %s/run.yaml --set data.eval_split=0.25", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 0, "%s", out);
    char *path = cli_path(dir, "run/metrics.jsonl");
    cr_assert_eq(qlt_read_file(path, &metrics, NULL), 0);
    cr_expect_eq(json_int(metrics, "eval_tokens"), tokens, "train's eval vs eval's: %s", metrics);
    free(path);
    free(metrics);
    free(args);
    free(out);
    qlt_remove_tree(dir);
    free(dir);
}

Test(cli_eval, adapter_as_argument_or_option) {
    char *dir = cli_tiny_dir(20, NULL), *args = NULL, *out = NULL;
    if (asprintf(&args, "train --config %s/run.yaml --set train.lr=0.05 --set train.max_steps=3", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 0, "%s", out);
    free(args);
    free(out);
    char *loss[3];
    const char *forms[3] = {"", "%s/run/final", "--adapter %s/run/final"};
    for (int i = 0; i < 3; i++) {
        char *tail = NULL;
        if (asprintf(&tail, forms[i], dir) < 0) abort();
        if (asprintf(&args, "eval --config %s/run.yaml %s", dir, tail) < 0) abort();
        cr_assert_eq(cli_run(args, &out), 0, "%s: %s", args, out);
        const char *line = eval_line(out);
        cr_assert(line, "%s", out);
        cr_expect(strstr(line, i == 0 ? "\"adapter\": false" : "\"adapter\": true"), "%s: %s", args, line);
        loss[i] = strndup(line, strcspn(line, ","));
        free(tail);
        free(args);
        free(out);
    }
    cr_expect_str_eq(loss[1], loss[2], "the same adapter either way");
    cr_expect_str_neq(loss[0], loss[1], "the adapter changes the loss");
    for (int i = 0; i < 3; i++) free(loss[i]);
    if (asprintf(&args, "eval --config %s/run.yaml %s/run/final --adapter %s/run/final", dir, dir, dir) < 0) abort();
    cr_expect_eq(cli_run(args, &out), 1, "two adapters: %s", out);
    cr_expect(strstr(out, "one adapter"), "%s", out);
    free(args);
    free(out);
    qlt_remove_tree(dir);
    free(dir);
}

Test(cli_eval, long_evaluations_show_progress) {
    char *dir = cli_tiny_dir(60, NULL), *args = NULL, *out = NULL;
    if (asprintf(&args, "eval --config %s/run.yaml --set train.micro_batch=1", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 0, "%s", out);
    long long rows = json_int(eval_line(out), "rows");
    char last[64];
    snprintf(last, sizeof last, "qlora-train: eval: batch %lld/%lld\n", rows, rows);
    cr_expect(rows > 4 && strstr(out, last), "'%s' missing: %s", last, out);
    int lines = cli_count(out, "qlora-train: eval: batch ");
    cr_expect(lines >= 5 && lines <= 11, "a line every tenth: %d lines in %s", lines, out);
    free(args);
    free(out);
    qlt_remove_tree(dir);
    free(dir);
}
