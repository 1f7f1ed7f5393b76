/* sweep_runner.h: runs a sweep's runs as child processes of the qlora-train binary
 * (`EXE train --config BASE --set KEY=VALUE ... --set output.dir=RUN_DIR --set data.cache_dir=SWEEP_DIR/cache
 * --resume auto`): one after another, or one per GPU at a time (CUDA_VISIBLE_DEVICES set per child). Each
 * child's output is teed into RUN_DIR/train.log; a run whose final/ exists is skipped; the summary is
 * rewritten after every run. */
#ifndef QLT_SWEEP_RUNNER_H
#define QLT_SWEEP_RUNNER_H

#include <stddef.h>

#include "sweep/sweep.h"

enum { QLT_SWEEP_MAX_GPUS = 64 };

typedef struct qlt_sweep_options {
    const char *exe;                 /* the binary the runs execute ("/proc/self/exe") */
    int n_gpus;                      /* --gpus: one run per listed GPU at a time; 0 = one run at a time on what
                                        the environment gives (CUDA_VISIBLE_DEVICES untouched) */
    int gpus[QLT_SWEEP_MAX_GPUS];
    int stop_after;                  /* QLT_SWEEP_STOP_AFTER: start no run once this many ended; 0 = off */
} qlt_sweep_options;

/* What a run's directory holds now, for --dry-run and the start line: "finished (skipped)",
 * "resumes from checkpoint-20", "new". */
void qlt_sweep_run_state(const qlt_sweep_run *r, char *buf, size_t size);

/* Runs every run of sw. Returns 0 when every run is done or skipped, 1 when any run failed, 3 when
 * stop_after stopped it early; -1 with qlt_fail when the sweep itself cannot go on (output.dir not
 * writable, fork failed). */
int qlt_sweep_run_all(const qlt_sweep *sw, const qlt_sweep_options *opt);

#endif
