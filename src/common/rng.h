/* rng.h: the project's seeded random generator (xoshiro256**, seeded by splitmix64). Its whole state is
 * four words, so checkpoints store it and a resumed run continues the same stream. */
#ifndef QLT_RNG_H
#define QLT_RNG_H

#include <stdint.h>

typedef struct qlt_rng {
    uint64_t s[4];
} qlt_rng;

void qlt_rng_seed(qlt_rng *r, uint64_t seed);
uint64_t qlt_rng_next(qlt_rng *r);
/* [0, 1) with 24 random bits */
float qlt_rng_uniform(qlt_rng *r);
/* uniform integer in [0, n) without modulo bias */
uint64_t qlt_rng_below(qlt_rng *r, uint64_t n);
/* Fisher-Yates shuffle of idx[0..n) */
void qlt_rng_shuffle(qlt_rng *r, int64_t *idx, int64_t n);

#endif
