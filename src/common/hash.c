/* hash.c: qlt_hash64 (see hash.h): 8 bytes a step, a multiply and a rotate-xor per step, the tail
 * folded in with its length so "a" and "a\0" differ. */
#include "common/hash.h"

#include <string.h>

#define QLT_HASH_K1 0x9e3779b97f4a7c15ULL
#define QLT_HASH_K2 0xbf58476d1ce4e5b9ULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t qlt_hash64(const void *data, size_t len, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = seed ^ (len * QLT_HASH_K1);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = rotl64(h ^ (w * QLT_HASH_K2), 31) * QLT_HASH_K1;
    }
    uint64_t tail = 0;
    memcpy(&tail, p + i, len - i);
    h ^= (tail * QLT_HASH_K2) ^ (uint64_t)(len - i);
    h = rotl64(h, 27) * QLT_HASH_K1;
    return qlt_hash_mix64(h);
}
