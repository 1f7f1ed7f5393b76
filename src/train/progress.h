/* progress.h: what a training run prints while it runs. On a terminal, one status line redrawn in place
 * (step/total, a bar, smoothed loss, lr, tokens/s, elapsed and ETA, backend memory; during an evaluation its
 * batches), with eval results and checkpoint saves printed above it as ordinary lines. Elsewhere (a log file,
 * a pipe) the plain lines of before: one every train.log_every steps, and a start and an end line per
 * evaluation. */
#ifndef QLT_PROGRESS_H
#define QLT_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "train/trainer.h"

typedef struct qlt_progress {
    FILE *out;
    int tty;                  /* 1: redraw one line in place */
    int log_every;            /* plain mode: a line every N steps (and at the last step) */
    int64_t first_step;       /* steps done before this run (a resumed run) */
    int64_t total_steps;
    double start_time;        /* qlt_now_seconds() at init */
    double last_draw;         /* when the status line was last drawn */
    int line_shown;           /* the status line is on the terminal now (the cursor at its end) */
    /* the latest step, for redraws */
    int64_t step;
    double loss_ema, tokens_per_s_ema, lr; /* EMAs before bias correction */
    int64_t n_ema;
    int64_t skipped_steps; /* shown when not 0 */
    double step_seconds_sum;  /* of this run's steps: the ETA's rate */
    int64_t n_steps;
    size_t mem_now, mem_peak; /* backend bytes held now / at most */
    /* an evaluation in progress: batches done / total (total 0: none) */
    int64_t eval_done, eval_total;
} qlt_progress;

/* tty: whether out is a terminal (isatty); first_step: where a resumed run starts. */
void qlt_progress_init(qlt_progress *p, FILE *out, int tty, int64_t first_step, int64_t total_steps, int log_every);
/* A finished step, with the backend's memory now and its peak (bytes; 0 = unknown). */
void qlt_progress_step(qlt_progress *p, const qlt_step_metrics *m, size_t mem_now, size_t mem_peak);
/* An ordinary line (no newline in fmt): above the status line on a terminal, as it is elsewhere. */
void qlt_progress_line(qlt_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An evaluation of `batches` micro-batches starts at step `step` (plain mode: one line says so). */
void qlt_progress_eval_begin(qlt_progress *p, int64_t step, int64_t rows, int64_t batches);
/* done of the evaluation's batches are finished (terminal: shown on the status line). */
void qlt_progress_eval_batch(qlt_progress *p, int64_t done);
/* The evaluation is over (its result goes out through qlt_progress_line). */
void qlt_progress_eval_end(qlt_progress *p);
/* Ends the status line (a newline after it) so that what follows starts on a line of its own. */
void qlt_progress_finish(qlt_progress *p);

/* "1:02:03" / "02:03" for seconds (into buf of n bytes). */
void qlt_progress_format_duration(char *buf, size_t n, double seconds);
/* "512 B", "1.5 KiB", "12.3 MiB", "1.20 GiB" (into buf of n bytes). */
void qlt_progress_format_bytes(char *buf, size_t n, double bytes);

#endif
