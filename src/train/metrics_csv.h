/* metrics_csv.h: output.dir/metrics.csv, the spreadsheet twin of metrics.jsonl: a header, then one row per
 * finished step and one per evaluation (the columns the row's kind lacks are empty), the numbers printed
 * with the same formats as metrics.jsonl so both files hold equal values. */
#ifndef QLT_METRICS_CSV_H
#define QLT_METRICS_CSV_H

#include <stdint.h>
#include <stdio.h>

#include "train/trainer.h"

#define QLT_METRICS_CSV_HEADER                                                                                   \
    "step,loss,grad_norm,lr,tokens,tokens_per_s,counted_tokens,epoch,step_time_s,eval_loss,eval_perplexity," \
    "eval_tokens,skipped_steps"

/* Opens path to append (append = 1: a resumed run, the header only when the file is new or empty) or
 * to write afresh (append = 0). NULL with the error set when it cannot be opened. */
FILE *qlt_metrics_csv_open(const char *path, int append);
void qlt_metrics_csv_step(FILE *f, const qlt_step_metrics *m);
void qlt_metrics_csv_eval(FILE *f, int64_t step, double loss, int64_t counted);

#endif
