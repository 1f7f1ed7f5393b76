/* dropout.c: inverted dropout (reference). Element i is kept iff qlt_dropout_keep(seed, i, p): a counter
 * hash, stateless, so the backward regenerates exactly the same mask; the CUDA kernel includes the same
 * function (common/counter_hash.h). */
#include "cpu/cpu_ops.h"

void qlt_cpu_dropout(float *out, const float *x, int64_t count, float p, uint64_t seed) {
    float inv_keep = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < count; i++) out[i] = qlt_dropout_keep(seed, (uint64_t)i, p) ? x[i] * inv_keep : 0.0f;
}
