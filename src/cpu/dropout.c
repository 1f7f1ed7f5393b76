/* dropout.c: inverted dropout with a counter-based keep mask: element i of a call is kept iff a 64-bit
 * mix of (seed, offset + i) lands above p. Stateless, so the backward (and the CUDA kernel, which uses
 * the same qlt_dropout_keep) regenerates exactly the same mask, and graph replays only need new seeds. */
#include "cpu/cpu_ops.h"

/* splitmix64 finalizer over seed ^ golden-ratio-scrambled index. */
int qlt_dropout_keep(uint64_t seed, uint64_t index, float p) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = (double)(z >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
    return u >= (double)p;
}

uint64_t qlt_dropout_seed(uint64_t step_seed, uint64_t salt) {
    return step_seed ^ (0xd1b54a32d192ed03ull * (salt + 1));
}

void qlt_cpu_dropout(float *out, const float *x, int64_t count, float p, uint64_t seed) {
    float inv_keep = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < count; i++) out[i] = qlt_dropout_keep(seed, (uint64_t)i, p) ? x[i] * inv_keep : 0.0f;
}
