/* sample.c: the next token from logits (see sample.h). */
#define _GNU_SOURCE
#include "infer/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int qlt_sample_check(const qlt_sample_opts *o) {
    if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
        return qlt_fail("--temperature %g: must be >= 0 (0 = greedy)", (double)o->temperature);
    if (o->top_k < 0) return qlt_fail("--top-k %d: must be >= 0 (0 = off)", o->top_k);
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f)) return qlt_fail("--top-p %g: must be in (0, 1]", (double)o->top_p);
    if (!(o->repetition_penalty > 0.0f) || !isfinite(o->repetition_penalty))
        return qlt_fail("--repetition-penalty %g: must be > 0 (1 = off)", (double)o->repetition_penalty);
    return 0;
}

size_t qlt_sample_scratch_bytes(int32_t vocab) {
    return (size_t)vocab * (2 * sizeof(int32_t) + sizeof(float));
}

/* Sorting ids by logit (ctx), highest first; equal logits keep the lower id first (a stable order). */
static int by_logit_desc(const void *a, const void *b, void *ctx) {
    const float *logits = ctx;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const float lx = logits[x], ly = logits[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int32_t argmax(const float *logits, int32_t vocab) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int32_t qlt_sample_next(const qlt_sample_opts *o, float *logits, int32_t vocab, const int32_t *history,
                        int64_t n_history, qlt_rng *rng, void *scratch) {
    int32_t *order = scratch;              /* [vocab] ids by logit */
    int32_t *seen = order + vocab;         /* [vocab] marks of the penalized ids */
    float *probs = (float *)(seen + vocab); /* [vocab] */
    if (o->repetition_penalty != 1.0f) {
        memset(seen, 0, sizeof(int32_t) * (size_t)vocab);
        for (int64_t i = 0; i < n_history; i++) {
            const int32_t id = history[i];
            if (id < 0 || id >= vocab || seen[id]) continue;
            seen[id] = 1;
            logits[id] = logits[id] > 0 ? logits[id] / o->repetition_penalty : logits[id] * o->repetition_penalty;
        }
    }
    if (o->temperature <= 0.0f) return argmax(logits, vocab);
    for (int32_t i = 0; i < vocab; i++) logits[i] /= o->temperature;
    /* only ids within 40 of the largest scaled logit can be drawn: the others' probabilities are below e^-40 each
     * (at most ~1e-12 together for a vocabulary of 10^5), so sorting them would change nothing */
    const float top = logits[argmax(logits, vocab)];
    int32_t candidates = 0;
    for (int32_t i = 0; i < vocab; i++)
        if (logits[i] >= top - 40.0f) order[candidates++] = i;
    qsort_r(order, (size_t)candidates, sizeof(int32_t), by_logit_desc, logits);
    int32_t keep = candidates;
    if (o->top_k > 0 && o->top_k < keep) keep = o->top_k;
    /* softmax over the kept ids, in double; then the top-p cut over the same distribution */
    const double mx = logits[order[0]];
    double sum = 0;
    for (int32_t i = 0; i < keep; i++) sum += exp((double)logits[order[i]] - mx);
    if (o->top_p < 1.0f) {
        double cum = 0;
        int32_t cut = keep;
        for (int32_t i = 0; i < keep; i++) {
            cum += exp((double)logits[order[i]] - mx) / sum;
            if (cum >= o->top_p) {
                cut = i + 1;
                break;
            }
        }
        keep = cut;
        sum = 0;
        for (int32_t i = 0; i < keep; i++) sum += exp((double)logits[order[i]] - mx);
    }
    for (int32_t i = 0; i < keep; i++) probs[i] = (float)(exp((double)logits[order[i]] - mx) / sum);
    /* one draw: the first kept id whose cumulative probability exceeds u */
    const double u = (double)qlt_rng_uniform(rng);
    double cum = 0;
    for (int32_t i = 0; i < keep; i++) {
        cum += probs[i];
        if (u < cum) return order[i];
    }
    return order[keep - 1];
}
