/* hash.h: a fast, non-cryptographic 64-bit hash for hash-table keys and cache keys.
 *
 * Word-at-a-time multiply-xorshift mixing (our own construction, in the spirit of wyhash/xxhash):
 * good spread for short strings (vocabulary entries) and ~GB/s over whole files (dataset cache key).
 * Not stable across endianness; the cache it keys is local to one machine. */
#ifndef QLT_HASH_H
#define QLT_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Hash of len bytes, continuing from `seed` (pass the previous result to chain several buffers). */
uint64_t qlt_hash64(const void *data, size_t len, uint64_t seed);
/* Mixes one 64-bit value (integer keys: merge pairs). */
static inline uint64_t qlt_hash_mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x;
}

#endif
