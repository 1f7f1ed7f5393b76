/* eval_data.c: see eval_data.h. */
#include "train/eval_data.h"

#include <stdio.h>
#include <string.h>

int qlt_eval_rows_of_train(qlt_dataset *train, qlt_dataset *eval, float eval_split, uint64_t seed) {
    if (eval_split > 0) return qlt_dataset_split(train, eval, eval_split, seed);
    *eval = *train;
    memset(train, 0, sizeof *train);
    return 0;
}

void qlt_eval_progress(qlt_backend *be, void *scalars, int64_t done, int64_t total) {
    if (done > 0 && done < total && done * 10 / total == (done - 1) * 10 / total) return;
    if (done == 0) return;
    if (scalars) { /* the batches are queued on the device: wait for them, so the count is of finished ones */
        qlt_optim_scalars s;
        be->download(be, &s, scalars, sizeof s);
    }
    fprintf(stderr, "qlora-train: eval: batch %lld/%lld\n", (long long)done, (long long)total);
}
