/* cmd_sweep.c: `qlora-train sweep SWEEP.yaml [--gpus 0,1,...] [--dry-run]`: reads the sweep file, checks the
 * base config, then lists the runs (--dry-run) or runs them (src/sweep). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_config.h"
#include "cli/commands.h"
#include "common/env.h"
#include "common/error.h"
#include "config/config.h"
#include "sweep/sweep.h"
#include "sweep/sweep_runner.h"

const qlt_cli_option qlt_sweep_cli_options[] = {
    {"--gpus", "0,1,...", "one run at a time on the device train.device picks",
     "one run per listed GPU at a time (CUDA_VISIBLE_DEVICES set per run)"},
    {"--dry-run", NULL, NULL, "list the runs the sweep would make, and their status, and start none"},
    {NULL, NULL, NULL, NULL},
};

static void usage(void) {
    printf("usage: qlora-train sweep SWEEP.yaml [--gpus 0,1,...] [--dry-run]\n\n"
           "Runs one training run per combination of a sweep file's grid values and per random draw, each in\n"
           "<output.dir>/<run name>/ (a child `qlora-train train --config BASE --set ... --resume auto`), and\n"
           "writes <output.dir>/summary.md and summary.csv after every run. Started again, it skips finished\n"
           "runs and resumes unfinished ones. Exit status 1 when any run failed. Sweep files: docs/SWEEPS.md.\n\n");
    qlt_cli_print_options(stdout, qlt_sweep_cli_options);
}

static int parse_gpus(const char *text, qlt_sweep_options *opt) {
    const char *p = text;
    opt->n_gpus = 0;
    while (*p) {
        char *end;
        long g = strtol(p, &end, 10);
        if (end == p || g < 0 || g > 1023 || (*end && *end != ','))
            return qlt_fail("--gpus %s: expected GPU numbers separated by commas, e.g. --gpus 0,1", text);
        if (opt->n_gpus == QLT_SWEEP_MAX_GPUS) return qlt_fail("--gpus %s: at most %d GPUs", text, QLT_SWEEP_MAX_GPUS);
        for (int i = 0; i < opt->n_gpus; i++)
            if (opt->gpus[i] == g) return qlt_fail("--gpus %s: GPU %ld is listed twice", text, g);
        opt->gpus[opt->n_gpus++] = (int)g;
        p = *end ? end + 1 : end;
    }
    if (opt->n_gpus == 0) return qlt_fail("--gpus: expected GPU numbers separated by commas, e.g. --gpus 0,1");
    return 0;
}

/* The run's config as its child would read it; 0, or -1 with the child's error. */
static int check_run_config(const qlt_sweep *sw, const qlt_sweep_run *r) {
    qlt_config cfg;
    qlt_config_defaults(&cfg);
    int rc = qlt_config_load_file(&cfg, sw->base);
    for (int i = 0; i < r->n_set && rc == 0; i++) {
        char *a = qlt_xmalloc(strlen(r->keys[i]) + strlen(r->values[i]) + 2);
        sprintf(a, "%s=%s", r->keys[i], r->values[i]);
        rc = qlt_config_set(&cfg, a);
        free(a);
    }
    if (rc == 0) rc = qlt_config_validate(&cfg);
    qlt_config_free(&cfg);
    return rc;
}

static void dry_run(const qlt_sweep *sw) {
    printf("sweep %s: %d runs from %s into %s/\n", sw->path, sw->n_runs, sw->base, sw->out_dir);
    for (int i = 0; i < sw->n_runs; i++) {
        const qlt_sweep_run *r = &sw->runs[i];
        char state[128];
        qlt_sweep_run_state(r, state, sizeof state);
        printf("%-40s", r->name);
        for (int k = 0; k < r->n_set; k++) printf(" %s=%s", r->keys[k], r->values[k]);
        if (check_run_config(sw, r) != 0) {
            printf("  -> would fail: %s\n", qlt_error());
            qlt_error_clear();
        } else {
            printf("  -> %s\n", state);
        }
    }
}

int qlt_cmd_sweep(int argc, char **argv) {
    const char *path = NULL;
    int dry = 0;
    qlt_sweep_options opt = {.exe = "/proc/self/exe"};
    for (int i = 0;;) {
        const char *value = NULL;
        const int k = qlt_cli_next("sweep", qlt_sweep_cli_options, argc, argv, &i, &value);
        if (k == QLT_CLI_END) break;
        if (k == QLT_CLI_HELP) {
            usage();
            return 0;
        }
        if (k == QLT_CLI_ERROR) return qlt_cli_report_error();
        if (k == QLT_CLI_POSITIONAL) {
            if (path) {
                qlt_fail("sweep: unexpected argument '%s' (usage: qlora-train sweep SWEEP.yaml [--gpus 0,1] "
                         "[--dry-run])", value);
                return qlt_cli_report_error();
            }
            path = value;
        } else if (!strcmp(qlt_sweep_cli_options[k].name, "--dry-run")) {
            dry = 1;
        } else if (parse_gpus(value, &opt) != 0) { /* --gpus */
            return qlt_cli_report_error();
        }
    }
    if (!path) {
        qlt_fail("sweep: name the sweep file (qlora-train sweep SWEEP.yaml; see --help)");
        return qlt_cli_report_error();
    }
    const char *stop = qlt_env(QLT_ENV_SWEEP_STOP_AFTER);
    if (stop && qlt_cli_parse_int(qlt_env_name(QLT_ENV_SWEEP_STOP_AFTER), stop, 0, 1000000, &opt.stop_after) != 0)
        return qlt_cli_report_error();
    qlt_sweep sw;
    if (qlt_sweep_load(&sw, path) != 0) {
        qlt_sweep_free(&sw);
        return qlt_cli_report_error();
    }
    qlt_config base;
    qlt_config_defaults(&base);
    int rc = qlt_config_load_file(&base, sw.base);
    qlt_config_free(&base);
    if (rc != 0) {
        qlt_fail_context("%s: base", sw.path);
        qlt_sweep_free(&sw);
        return qlt_cli_report_error();
    }
    if (dry) {
        dry_run(&sw);
        qlt_sweep_free(&sw);
        return 0;
    }
    rc = qlt_sweep_run_all(&sw, &opt);
    qlt_sweep_free(&sw);
    if (rc < 0) return qlt_cli_report_error();
    return rc;
}
