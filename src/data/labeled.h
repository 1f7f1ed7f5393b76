/* labeled.h: appending tokens together with their labels (the id itself where loss is taken, -100
 * where it is not), shared by the dataset formats and the chat templates. */
#ifndef QLT_LABELED_H
#define QLT_LABELED_H

#include <string.h>

#include "tokenizer/tokenizer.h"

#define QLT_IGNORE_LABEL (-100)

/* One token: trained (label = id) or not (label = -100). */
static inline void qlt_labeled_push(qlt_ids *ids, qlt_ids *labels, int32_t id, int train) {
    qlt_ids_push(ids, id);
    qlt_ids_push(labels, train ? id : QLT_IGNORE_LABEL);
}

/* The tokens of len bytes of text, all trained or all not. */
static inline int qlt_labeled_span(qlt_encoder *enc, const char *text, size_t len, int train, qlt_ids *ids,
                                   qlt_ids *labels) {
    int64_t start = ids->len;
    QLT_TRY(qlt_encoder_encode(enc, text, len, ids));
    qlt_ids_reserve(labels, ids->len - start);
    for (int64_t i = start; i < ids->len; i++) labels->data[labels->len++] = train ? ids->data[i] : QLT_IGNORE_LABEL;
    return 0;
}

/* The tokens of a NUL-terminated text, all trained or all not. */
static inline int qlt_labeled_text(qlt_encoder *enc, const char *text, int train, qlt_ids *ids, qlt_ids *labels) {
    return qlt_labeled_span(enc, text, strlen(text), train, ids, labels);
}

#endif
