/* run_control.h: when a training run stops before its last step, and what it keeps on the way:
 *   - SIGINT / SIGTERM: the step in progress finishes, a checkpoint is written and the run exits 130 / 143
 *     with the command that continues it; a second signal exits at once (earlier checkpoints are intact).
 *   - the best eval loss so far (output.save_best: a full checkpoint in output.dir/best/) and early stopping
 *     (train.early_stopping_patience evals in a row without an improvement of train.early_stopping_min_delta);
 *     both survive resume through trainer_state.json.
 *   - a killed run's leftover temporary folders, removed on the next start; a run that already finished,
 *     recognized by --resume auto. */
#ifndef QLT_RUN_CONTROL_H
#define QLT_RUN_CONTROL_H

#include <stdint.h>

/* What trainer_state.json keeps of it (best_*, evals_without_improvement, early_stopped) and what the loop
 * decided (stop_signal). */
typedef struct qlt_run_state {
    double best_eval_loss;             /* NAN: no evaluation yet */
    int64_t best_step;                 /* -1: none */
    int64_t evals_without_improvement; /* evals in a row not min_delta below the best */
    int early_stopped;                 /* 1: patience ran out */
    int stop_signal;                   /* SIGINT / SIGTERM the loop stopped for; 0: none */
} qlt_run_state;

struct qlt_trainer;

/* The start of qlt_trainer_run, before resume: resets t->run, installs the SIGINT / SIGTERM handlers and
 * removes the temporary folders a killed run left in output.dir (one line each). */
int qlt_run_begin(struct qlt_trainer *t);
/* The signal that arrived since qlt_run_begin (SIGINT or SIGTERM), or 0. */
int qlt_run_signal_caught(void);
/* After each evaluation (loss at t->step): the best so far, best/ (output.save_best), the early-stop count. */
int qlt_run_after_eval(struct qlt_trainer *t, double loss);
/* After a step's eval and checkpoint: 1 when the loop ends here (signal: that signal, else early stopping),
 * saying why in one line; 0 to go on. */
int qlt_run_should_stop(struct qlt_trainer *t, int signal);
/* Exit status of `qlora-train train` after a run that returned 0: 0, or 128 + the signal it stopped for. */
int qlt_run_exit_status(const struct qlt_trainer *t);
/* --resume auto: 1 (after one line saying so) when output_dir/final/ holds the end of this run (its step is
 * total_steps, or the run stopped early), else 0. */
int qlt_run_already_finished(const char *output_dir, int64_t total_steps);

#endif
