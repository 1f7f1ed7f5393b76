/* dataset_pack.c: examples -> rows of exactly seq_len tokens (see dataset.h).
 *
 * An example longer than seq_len is cut to seq_len (n_truncated). With packing, examples are laid end
 * to end in file order and cut into rows; an example that does not fit continues at the start of the
 * next row as a new segment. Every segment's first label is -100 (nothing predicts across a boundary;
 * without packing this label is never used, and -100 keeps n_label_tokens = tokens actually trained).
 * Padding (the tail of the last packed row, or of each row without packing) is pad_id with labels
 * -100, forming its own segment. */
#include <string.h>

#include "common/error.h"
#include "data/dataset_internal.h"
#include "data/labeled.h"

void qlt_packer_init(qlt_packer *p, qlt_dataset *ds, int seq_len, int packing, int32_t pad_id) {
    memset(p, 0, sizeof *p);
    memset(ds, 0, sizeof *ds);
    ds->seq_len = seq_len;
    ds->pad_id = pad_id;
    p->ds = ds;
    p->packing = packing;
    p->pad_id = pad_id;
}

static void open_row(qlt_packer *p) {
    qlt_dataset *ds = p->ds;
    if (ds->n_rows == p->cap_rows) {
        p->cap_rows = p->cap_rows ? p->cap_rows * 2 : 64;
        size_t bytes = (size_t)p->cap_rows * (size_t)ds->seq_len * sizeof(int32_t);
        ds->input_ids = qlt_xrealloc(ds->input_ids, bytes);
        ds->labels = qlt_xrealloc(ds->labels, bytes);
        ds->seg_start = qlt_xrealloc(ds->seg_start, bytes);
    }
    ds->n_rows++;
    p->fill = 0;
}

/* Copies n tokens as one segment at the open row's fill position. */
static void put_segment(qlt_packer *p, const int32_t *ids, const int32_t *labels, int n) {
    qlt_dataset *ds = p->ds;
    int64_t base = (ds->n_rows - 1) * (int64_t)ds->seq_len + p->fill;
    memcpy(ds->input_ids + base, ids, (size_t)n * sizeof *ids);
    memcpy(ds->labels + base, labels, (size_t)n * sizeof *labels);
    ds->labels[base] = QLT_IGNORE_LABEL;
    for (int i = 0; i < n; i++) {
        ds->seg_start[base + i] = p->fill;
        if (ds->labels[base + i] != QLT_IGNORE_LABEL) ds->n_label_tokens++;
    }
    ds->n_tokens += n;
    p->fill += n;
}

static void pad_row(qlt_packer *p) {
    qlt_dataset *ds = p->ds;
    int64_t row = (ds->n_rows - 1) * (int64_t)ds->seq_len;
    for (int t = p->fill; t < ds->seq_len; t++) {
        ds->input_ids[row + t] = p->pad_id;
        ds->labels[row + t] = QLT_IGNORE_LABEL;
        ds->seg_start[row + t] = p->fill;
    }
    p->fill = ds->seq_len;
}

void qlt_packer_add(qlt_packer *p, const int32_t *ids, const int32_t *labels, int64_t n) {
    qlt_dataset *ds = p->ds;
    if (n <= 0) return;
    ds->n_examples++;
    if (n > ds->seq_len) {
        n = ds->seq_len;
        ds->n_truncated++;
    }
    if (!p->packing) {
        open_row(p);
        put_segment(p, ids, labels, (int)n);
        pad_row(p);
        return;
    }
    while (n > 0) {
        if (ds->n_rows == 0 || p->fill == ds->seq_len) open_row(p);
        int k = (int)(n < ds->seq_len - p->fill ? n : ds->seq_len - p->fill);
        put_segment(p, ids, labels, k);
        ids += k;
        labels += k;
        n -= k;
    }
}

void qlt_packer_finish(qlt_packer *p) {
    qlt_dataset *ds = p->ds;
    if (p->packing && ds->n_rows > 0 && p->fill < ds->seq_len) pad_row(p);
    if (ds->n_rows > 0 && ds->n_rows < p->cap_rows) {
        size_t bytes = (size_t)ds->n_rows * (size_t)ds->seq_len * sizeof(int32_t);
        ds->input_ids = qlt_xrealloc(ds->input_ids, bytes);
        ds->labels = qlt_xrealloc(ds->labels, bytes);
        ds->seg_start = qlt_xrealloc(ds->seg_start, bytes);
        p->cap_rows = ds->n_rows;
    }
}
