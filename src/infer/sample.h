/* sample.h: picking the next token from a step's logits, with the processors of Hugging Face `generate` in its
 * order: repetition penalty (over every id of the prompt and what was generated so far), then greedy argmax
 * when temperature <= 0, else temperature, top-k, top-p, softmax and one draw from the seeded generator. */
#ifndef QLT_SAMPLE_H
#define QLT_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"

typedef struct qlt_sample_opts {
    float temperature;        /* <= 0: greedy (argmax; ties go to the lowest id, as torch.argmax) */
    int top_k;                /* keep the k most likely ids; 0: all */
    float top_p;              /* keep the fewest most likely ids whose probabilities sum to >= top_p; 1: all */
    float repetition_penalty; /* > 0; 1: off. Logit / penalty where positive, * penalty where not (CTRL, as HF) */
} qlt_sample_opts;

/* 0, or -1 with qlt_fail naming the option that is out of range. */
int qlt_sample_check(const qlt_sample_opts *o);
/* The next id from logits [vocab], which it modifies (penalized, scaled, filtered). history [n_history]: the ids so
 * far. scratch: 2 * vocab int32 + vocab float of the caller's. */
int32_t qlt_sample_next(const qlt_sample_opts *o, float *logits, int32_t vocab, const int32_t *history,
                        int64_t n_history, qlt_rng *rng, void *scratch);
/* Bytes of qlt_sample_next's scratch for vocab ids. */
size_t qlt_sample_scratch_bytes(int32_t vocab);

#endif
