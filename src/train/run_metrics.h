/* run_metrics.h: a run's metrics.jsonl read back (for `qlora-train plot`, the end-of-run loss.png and anything
 * else that looks at a finished or running run): the training steps' loss, lr and gradient norm, and the
 * evaluations' losses, each series in step order as the file holds them. */
#ifndef QLT_RUN_METRICS_H
#define QLT_RUN_METRICS_H

#include <stdint.h>

typedef struct qlt_run_metrics {
    int64_t n_steps;   /* lines with "loss" */
    int64_t *step;     /* [n_steps] */
    double *loss, *lr, *grad_norm, *tokens_per_s; /* [n_steps] */
    int64_t n_evals;   /* lines with "eval_loss" */
    int64_t *eval_step; /* [n_evals] */
    double *eval_loss;  /* [n_evals] */
} qlt_run_metrics;

/* Reads path: a metrics.jsonl file, or a run directory holding one. A line that is not a JSON object with
 * an integer "step" is an error naming the file and line. */
int qlt_run_metrics_read(const char *path, qlt_run_metrics *out);
void qlt_run_metrics_free(qlt_run_metrics *m);

#endif
