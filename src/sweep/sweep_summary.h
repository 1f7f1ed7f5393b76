/* sweep_summary.h: what each run of a sweep came to, read from its metrics.jsonl, and the two tables
 * (summary.md for people, summary.csv for tools) written into the sweep's output.dir after every run. */
#ifndef QLT_SWEEP_SUMMARY_H
#define QLT_SWEEP_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "sweep/sweep.h"

typedef enum qlt_sweep_status {
    QLT_SWEEP_PENDING, /* not run (yet) by this sweep */
    QLT_SWEEP_RUNNING,
    QLT_SWEEP_DONE,
    QLT_SWEEP_FAILED,
    QLT_SWEEP_SKIPPED, /* finished by an earlier start of the sweep */
} qlt_sweep_status;

/* What the scheduler knows of a run. */
typedef struct qlt_sweep_result {
    qlt_sweep_status status;
    char reason[512]; /* FAILED: one line (the run's last "qlora-train: error:" line, or how it ended) */
    double wall_s;    /* seconds the run's process took; < 0 when unknown */
} qlt_sweep_result;

/* What a run's metrics.jsonl says. */
typedef struct qlt_sweep_metrics {
    int has_eval;          /* an eval record was written */
    double best_eval_loss; /* the lowest eval_loss and its step */
    int64_t best_step;
    double final_eval_loss;
    int has_train;         /* a step record was written */
    double final_train_loss;
    int64_t last_step;
    double tokens_per_s;   /* tokens over step time, all steps */
    size_t peak_bytes;     /* the highest peak_bytes of the step records (0: not recorded) */
} qlt_sweep_metrics;

/* "pending", "running", "done", "failed", "skipped" */
const char *qlt_sweep_status_text(qlt_sweep_status s);

/* Reads <run_dir>/metrics.jsonl (a missing file or a line that is not JSON leaves fields unset). */
void qlt_sweep_read_metrics(const char *run_dir, qlt_sweep_metrics *m);

/* Writes <output.dir>/summary.md and summary.csv (atomically): one row per run with its varied values,
 * best and final eval loss (and the best's step), final train loss, tokens/s, peak memory, wall time and
 * status; sorted by best eval loss, runs without one last in run order. results: [sw->n_runs]. */
int qlt_sweep_write_summary(const qlt_sweep *sw, const qlt_sweep_result *results);

#endif
