/* test_cli_env.c: CUDA_GRAPH is read strictly (1/0, true/false, yes/no, on/off in any case; anything else is a
 * one-line error naming it), sits between the config file and --set, and the value a run used is what its
 * run_config.json records (on the CPU too, where the backend has no graphs and says so). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileutil.h"
#include "config/config.h"
#include "test_cli_util.h"

Test(cli_env, cuda_graph_words) {
    const char *on[] = {"1", "true", "YES", "On"}, *off[] = {"0", "FALSE", "no", "oFF"};
    for (int i = 0; i < 4; i++) {
        qlt_config cfg;
        qlt_config_defaults(&cfg);
        setenv("CUDA_GRAPH", on[i], 1);
        cr_assert_eq(qlt_config_apply_env(&cfg), 0, "%s", on[i]);
        cr_expect_eq(cfg.train.cuda_graph, 1, "CUDA_GRAPH=%s", on[i]);
        setenv("CUDA_GRAPH", off[i], 1);
        cfg.train.cuda_graph = 1;
        cr_assert_eq(qlt_config_apply_env(&cfg), 0, "%s", off[i]);
        cr_expect_eq(cfg.train.cuda_graph, 0, "CUDA_GRAPH=%s", off[i]);
        qlt_config_free(&cfg);
    }
    unsetenv("CUDA_GRAPH");
}

Test(cli_env, cuda_graph_bad_value_is_one_line) {
    char *dir = cli_tiny_dir(8, NULL), *args = NULL, *out = NULL;
    setenv("CUDA_GRAPH", "maybe", 1);
    if (asprintf(&args, "train --config %s/run.yaml", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 1, "%s", out);
    cr_expect_eq(cli_count(out, "\n"), 1, "one line: %s", out);
    cr_expect(strstr(out, "qlora-train: error: environment variable CUDA_GRAPH='maybe'") &&
                  strstr(out, "1/0, true/false, yes/no, on/off"),
              "%s", out);
    free(args);
    free(out);
    qlt_remove_tree(dir);
    free(dir);
}

/* The run's own record: CUDA_GRAPH=on is written as train.cuda_graph true (the CPU ignores it, saying so); --set
 * wins over the environment. */
Test(cli_env, cuda_graph_recorded_in_run_config) {
    char *dir = cli_tiny_dir(8, NULL), *args = NULL, *out = NULL, *text = NULL;
    char *run_config = cli_path(dir, "run/run_config.json");
    setenv("CUDA_GRAPH", "on", 1);
    if (asprintf(&args, "train --config %s/run.yaml", dir) < 0) abort();
    cr_assert_eq(cli_run(args, &out), 0, "%s", out);
    cr_expect(strstr(out, "the cpu backend has no graphs: train.cuda_graph ignored"), "%s", out);
    cr_assert_eq(qlt_read_file(run_config, &text, NULL), 0);
    cr_expect(strstr(text, "\"cuda_graph\":\ttrue"), "%s", text);
    free(text);
    free(out);
    free(args);
    if (asprintf(&args, "train --config %s/run.yaml --set output.overwrite=true --set train.cuda_graph=false", dir) < 0)
        abort();
    cr_assert_eq(cli_run(args, &out), 0, "%s", out);
    cr_assert_eq(qlt_read_file(run_config, &text, NULL), 0);
    cr_expect(strstr(text, "\"cuda_graph\":\tfalse"), "--set wins over CUDA_GRAPH: %s", text);
    free(text);
    free(out);
    free(args);
    free(run_config);
    unsetenv("CUDA_GRAPH");
    qlt_remove_tree(dir);
    free(dir);
}
