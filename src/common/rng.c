/* rng.c: xoshiro256** (Blackman & Vigna), see rng.h. */
#include "common/rng.h"

#include "common/counter_hash.h"

static uint64_t splitmix64(uint64_t *x) { return qlt_splitmix_finalize(*x += 0x9e3779b97f4a7c15ull); }

void qlt_rng_seed(qlt_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t qlt_rng_next(qlt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float qlt_rng_uniform(qlt_rng *r) { return (float)(qlt_rng_next(r) >> 40) * (1.0f / 16777216.0f); }

uint64_t qlt_rng_below(qlt_rng *r, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = qlt_rng_next(r);
    while (x >= limit);
    return x % n;
}

void qlt_rng_shuffle(qlt_rng *r, int64_t *idx, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)qlt_rng_below(r, (uint64_t)i + 1);
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}
