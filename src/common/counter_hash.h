/* counter_hash.h: the stateless 64-bit mixing every seeded-but-stateless random choice uses: the splitmix64
 * finalizer, a counter hash of (seed, index), and the LoRA dropout keep-mask built on it. Host and device
 * share this code (QLT_HD), so the CPU reference and the CUDA kernels draw the same dropout masks by
 * construction, and graph replays only need new seeds. */
#ifndef QLT_COUNTER_HASH_H
#define QLT_COUNTER_HASH_H

#include <stdint.h>

#include "common/hostdev.h"

/* splitmix64's output function (Steele, Lea, Flood). */
QLT_HD uint64_t qlt_splitmix_finalize(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Element `index` of the stream of seed: the (index + 1)-th output of splitmix64 started at seed. */
QLT_HD uint64_t qlt_counter_hash(uint64_t seed, uint64_t index) {
    return qlt_splitmix_finalize(seed + 0x9e3779b97f4a7c15ull * (index + 1));
}

/* 1 when element `index` is kept at drop probability p: a uniform [0, 1) from the hash's top 53 bits
 * (exact in double) compared with p. */
QLT_HD int qlt_dropout_keep(uint64_t seed, uint64_t index, float p) {
    double u = (double)(qlt_counter_hash(seed, index) >> 11) * (1.0 / 9007199254740992.0);
    return u >= (double)p;
}

/* The mask seed of one dropout site: the step's seed mixed with the site's salt (layer, projection). */
QLT_HD uint64_t qlt_dropout_seed(uint64_t step_seed, uint64_t salt) {
    return step_seed ^ (0xd1b54a32d192ed03ull * (salt + 1));
}

#endif
