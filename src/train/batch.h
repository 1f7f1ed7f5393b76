/* batch.h: moving rows of a dataset to the backend as one micro-batch: input ids, targets (labels
 * shifted left inside each row, -100 at the row end), positions (restarting at every packed example),
 * seg_start and its sliding-window twin seg_window. Host staging buffers are allocated once with the device
 * buffers. */
#ifndef QLT_BATCH_H
#define QLT_BATCH_H

#include <stdint.h>

#include "model/forward.h"

typedef struct qlt_batch_buffers {
    qlt_batch_dev dev;
    int32_t *host;   /* staging: 5 * batch * seq (ids, targets, positions, seg_start, seg_window); pinned when the
                        backend has host_alloc, so it can be sent asynchronously */
    int pinned;
    int32_t *device; /* one backend allocation holding the five arrays */
} qlt_batch_buffers;

/* window: the model's sliding_window (qlt_model_config), 0 for none; seg_window is staged for it. */
int qlt_batch_buffers_init(qlt_batch_buffers *bb, qlt_backend *be, int batch, int seq, int window);
void qlt_batch_buffers_free(qlt_batch_buffers *bb, qlt_backend *be);
/* Fills the host staging from rows: ids/labels/seg_start [batch, seq] (seg_start NULL = one example per
 * row). Returns the number of counted targets (labels != -100 after the shift). */
int64_t qlt_batch_stage(qlt_batch_buffers *bb, const int32_t *ids, const int32_t *labels, const int32_t *seg_start);
/* Sends the staging to the backend: synchronously, or stream-ordered (async, pinned staging required). */
void qlt_batch_send(qlt_batch_buffers *bb, qlt_backend *be, int async);
/* stage + synchronous send */
int64_t qlt_batch_upload(qlt_batch_buffers *bb, qlt_backend *be, const int32_t *ids, const int32_t *labels,
                         const int32_t *seg_start);
/* Counts targets of host rows without uploading (for the step's loss normalizer). */
int64_t qlt_batch_count_targets(const int32_t *labels, int batch, int seq);

#endif
