/* batch.c: host rows -> backend micro-batch (see batch.h). */
#include "train/batch.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int qlt_batch_buffers_init(qlt_batch_buffers *bb, qlt_backend *be, int batch, int seq, int window) {
    memset(bb, 0, sizeof *bb);
    size_t n = (size_t)batch * (size_t)seq;
    bb->host = be->host_alloc ? be->host_alloc(be, 5 * n * sizeof(int32_t)) : NULL;
    bb->pinned = bb->host != NULL;
    if (!bb->host) bb->host = qlt_xmalloc(5 * n * sizeof(int32_t));
    bb->device = be->alloc(be, 5 * n * sizeof(int32_t));
    if (!bb->device) {
        qlt_batch_buffers_free(bb, be);
        return qlt_fail("out of %s memory for a %d x %d batch", be->name, batch, seq);
    }
    bb->dev.batch = batch;
    bb->dev.seq = seq;
    bb->dev.input_ids = bb->device;
    bb->dev.targets = bb->device + n;
    bb->dev.positions = bb->device + 2 * n;
    bb->dev.seg_start = bb->device + 3 * n;
    bb->dev.seg_window = bb->device + 4 * n;
    bb->dev.window = window > 0 ? window : 0;
    return 0;
}

void qlt_batch_buffers_free(qlt_batch_buffers *bb, qlt_backend *be) {
    if (bb->device) be->free(be, bb->device);
    if (bb->pinned) be->host_free(be, bb->host);
    else free(bb->host);
    memset(bb, 0, sizeof *bb);
}

int64_t qlt_batch_count_targets(const int32_t *labels, int batch, int seq) {
    int64_t count = 0;
    for (int b = 0; b < batch; b++)
        for (int s = 0; s + 1 < seq; s++) count += labels[(int64_t)b * seq + s + 1] != -100;
    return count;
}

int64_t qlt_batch_stage(qlt_batch_buffers *bb, const int32_t *ids, const int32_t *labels, const int32_t *seg_start) {
    int batch = bb->dev.batch, seq = bb->dev.seq;
    size_t n = (size_t)batch * (size_t)seq;
    int32_t *h_ids = bb->host, *h_tgt = bb->host + n, *h_pos = bb->host + 2 * n, *h_seg = bb->host + 3 * n;
    int32_t *h_win = bb->host + 4 * n;
    const int window = bb->dev.window;
    memcpy(h_ids, ids, n * sizeof(int32_t));
    int64_t count = 0;
    bb->dev.max_position = 0;
    for (int b = 0; b < batch; b++) {
        for (int s = 0; s < seq; s++) {
            size_t t = (size_t)b * seq + s;
            int32_t target = s + 1 < seq ? labels[t + 1] : -100;
            h_tgt[t] = target;
            count += target != -100;
            h_seg[t] = seg_start ? seg_start[t] : 0;
            h_pos[t] = s - h_seg[t];
            if (h_pos[t] > bb->dev.max_position) bb->dev.max_position = h_pos[t];
            h_win[t] = window > 0 && s - window + 1 > h_seg[t] ? s - window + 1 : h_seg[t];
        }
    }
    return count;
}

void qlt_batch_send(qlt_batch_buffers *bb, qlt_backend *be, int async) {
    size_t bytes = 5 * (size_t)bb->dev.batch * (size_t)bb->dev.seq * sizeof(int32_t);
    if (async) {
        QLT_ASSERT(bb->pinned && be->upload_async);
        be->upload_async(be, bb->device, bb->host, bytes);
    } else {
        be->upload(be, bb->device, bb->host, bytes);
    }
}

int64_t qlt_batch_upload(qlt_batch_buffers *bb, qlt_backend *be, const int32_t *ids, const int32_t *labels,
                         const int32_t *seg_start) {
    int64_t count = qlt_batch_stage(bb, ids, labels, seg_start);
    qlt_batch_send(bb, be, 0);
    return count;
}
