/* run_log.h: everything a training run reports as it goes, behind the few calls the training loop makes:
 * metrics.jsonl and metrics.csv in output.dir (a resumed run first drops the lines of steps after the one it
 * resumed at), the TensorBoard events file (output.tensorboard: a fresh run deletes earlier ones, a resumed
 * run adds one), the progress on stderr (progress.h), and at the end output.dir/loss.png (loss_plot.h). */
#ifndef QLT_RUN_LOG_H
#define QLT_RUN_LOG_H

#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"
#include "train/trainer.h"

typedef struct qlt_run_log qlt_run_log;

/* Opens the logs of a run whose steps first_step+1 .. total_steps are to come (first_step > 0: a resumed
 * run, appending after its lines up to first_step). be: whose memory the progress shows (may be NULL).
 * NULL with the error set when a file cannot be written. */
qlt_run_log *qlt_run_log_open(const qlt_config *cfg, qlt_backend *be, int64_t first_step, int64_t total_steps);
/* A log that writes and prints nothing (data parallel: every rank but rank 0). */
qlt_run_log *qlt_run_log_open_quiet(const qlt_config *cfg);
/* A finished step (nothing when !m->valid). */
void qlt_run_log_step(qlt_run_log *log, const qlt_step_metrics *m);
/* An evaluation of `rows` rows in `batches` micro-batches starts after step `step`. */
void qlt_run_log_eval_begin(qlt_run_log *log, int64_t step, int64_t rows, int64_t batches);
/* qlt_trainer's eval_progress callback: done of total batches finished (ctx: the qlt_run_log). */
void qlt_run_log_eval_progress(void *ctx, int64_t done, int64_t total);
/* The evaluation's result: the metrics lines and the line on stderr. */
void qlt_run_log_eval(qlt_run_log *log, int64_t step, double loss, int64_t counted);
/* A checkpoint of `step` was written to dir (one line on stderr). */
void qlt_run_log_saved(qlt_run_log *log, int64_t step, const char *dir);
/* Closes the files, ends the progress line and, when run_ok, draws output.dir/loss.png (a failure there is a
 * warning). A failed run's error (qlt_error) is kept. Returns 1 when it drew loss.png, else 0. */
int qlt_run_log_close(qlt_run_log *log, int run_ok);

/* Drops the lines of path (metrics.jsonl or metrics.csv) of steps after `step`; lines without a step (the
 * CSV header) stay. A missing file is fine. */
int qlt_run_log_truncate(const char *path, int64_t step);

#endif
