/* eval_data.h: what evaluation needs beyond the trainer's forward passes: the rows it scores when there is no
 * data.eval (the same data.eval_split rows training holds out), and its progress line for long evaluations. */
#ifndef QLT_EVAL_DATA_H
#define QLT_EVAL_DATA_H

#include <stdint.h>

#include "backend/backend.h"
#include "data/dataset.h"

/* The rows of data.train that evaluation scores: with eval_split > 0 the last eval_split of them (as training
 * holds out; train keeps the rest), else all of them (moved into *eval, train left empty). 0, or -1 with
 * qlt_fail. */
int qlt_eval_rows_of_train(qlt_dataset *train, qlt_dataset *eval, float eval_split, uint64_t seed);
/* "qlora-train: eval: batch DONE/TOTAL" on stderr at every tenth of TOTAL (and at the end). scalars: backend
 * memory read back first so the count is of finished batches (NULL: already waited). */
void qlt_eval_progress(qlt_backend *be, void *scalars, int64_t done, int64_t total);

#endif
