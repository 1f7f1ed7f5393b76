/* test_cli_util.c: see test_cli_util.h. */
#define _GNU_SOURCE
#include "test_cli_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileutil.h"
#include "test_util.h"

char *cli_path(const char *dir, const char *name) { return qlt_path_join(dir, name); }

char *cli_tiny_dir(int n_lines, const char *extra) {
    char *dir = test_tmpdir();
    char *data = cli_path(dir, "train.jsonl");
    FILE *f = fopen(data, "w");
    cr_assert(f);
    for (int i = 0; i < n_lines; i++)
        fprintf(f, "{\"text\": \"Line %d of the tiny data set: the nation, the economy and the schools, %d.\"}\n", i,
                i * 7);
    fclose(f);
    char *yaml = NULL;
    if (asprintf(&yaml,
                 "model:\n"
                 "  path: random:examples/demo-model/config.json\n"
                 "data:\n"
                 "  train: [%s]\n"
                 "  format: text\n"
                 "  seq_len: 32\n"
                 "train:\n"
                 "  device: cpu\n"
                 "  lr: 1.0e-3\n"
                 "  micro_batch: 2\n"
                 "  max_steps: 1\n"
                 "output:\n"
                 "  dir: %s/run\n"
                 "%s",
                 data, dir, extra ? extra : "") < 0)
        abort();
    char *cfg = cli_path(dir, "run.yaml");
    test_write_text(cfg, yaml);
    free(cfg);
    free(yaml);
    free(data);
    return dir;
}

int cli_run(const char *args, char **out) { return test_run_cli(QLT_TEST_DATA "/../..", args, out); }

int cli_count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}
