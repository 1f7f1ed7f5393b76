/* token_ids.h: a growable array of token ids, the output type of every encoder. */
#ifndef QLT_TOKEN_IDS_H
#define QLT_TOKEN_IDS_H

#include <stdint.h>
#include <stdlib.h>

#include "common/error.h"

typedef struct qlt_ids {
    int32_t *data; /* [len] */
    int64_t len, cap;
} qlt_ids;

static inline void qlt_ids_reserve(qlt_ids *v, int64_t extra) {
    if (v->len + extra <= v->cap) return;
    int64_t cap = v->cap ? v->cap : 64;
    while (cap < v->len + extra) cap *= 2;
    v->data = qlt_xrealloc(v->data, (size_t)cap * sizeof *v->data);
    v->cap = cap;
}
static inline void qlt_ids_push(qlt_ids *v, int32_t id) {
    if (v->len == v->cap) qlt_ids_reserve(v, 1);
    v->data[v->len++] = id;
}
static inline void qlt_ids_free(qlt_ids *v) {
    free(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}

#endif
