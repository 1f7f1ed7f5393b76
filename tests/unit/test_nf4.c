/* test_nf4.c: the CPU NF4 reference reproduces bitsandbytes' choices exactly (the midpoint tree with its
 * ties, the dynamic map's float values, the 8-bit binary search, zero blocks, padding) and keeps the
 * quantization error within its bounds. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/error.h"
#include "cpu/backend_cpu.h"
#include "nf4/nf4.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct rng { uint64_t s; } rng;
static double uniform(rng *r) {
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return ((r->s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static float normal(rng *r) { return (float)(sqrt(-2.0 * log(uniform(r))) * cos(6.283185307179586 * uniform(r))); }
/* Student-t with 2 degrees of freedom: heavy tails (outliers hundreds of sigmas out). */
static float heavy(rng *r) { return (float)(normal(r) / sqrt(-log(uniform(r)))); }

/* The midpoints bnb's tree compares against (strict >), as float32. */
static const float midpoints[15] = {
    -0.8480964004993439f, -0.6106329262256622f,  -0.4599952697753906f, -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f,  0.2035212516784668f,   0.2920137718319893f,  0.3893125355243683f,
    0.5016634166240692f,  0.6427869200706482f,   0.8614784181118011f,
};

Test(nf4, tree_picks_each_code_and_ties_go_down) {
    for (int c = 0; c < 16; c++) cr_assert_eq(qlt_nf4_code_of(qlt_nf4_codebook[c]), c, "code %d", c);
    for (int m = 0; m < 15; m++) {
        /* exactly on the midpoint: the lower code (bnb compares with >) */
        cr_assert_eq(qlt_nf4_code_of(midpoints[m]), m, "tie at midpoint %d", m);
        cr_assert_eq(qlt_nf4_code_of(nextafterf(midpoints[m], INFINITY)), m + 1, "above midpoint %d", m);
        cr_assert_eq(qlt_nf4_code_of(nextafterf(midpoints[m], -INFINITY)), m, "below midpoint %d", m);
        /* the thresholds are the float midpoints of neighbouring codebook values */
        double mid = 0.5 * ((double)qlt_nf4_codebook[m] + (double)qlt_nf4_codebook[m + 1]);
        cr_assert(fabs(mid - (double)midpoints[m]) < 1e-7, "midpoint %d", m);
    }
    cr_assert_eq(qlt_nf4_code_of(NAN), 0);
    cr_assert_eq(qlt_nf4_code_of(-0.0f), 7);
    cr_assert_eq(qlt_nf4_code_of(2.0f), 15);
    cr_assert_eq(qlt_nf4_code_of(-2.0f), 0);
}

Test(nf4, hand_computed_block_and_nibble_order) {
    /* 64 values: the 16 codebook values times 3 (absmax 3 -> x/absmax is the codebook again, up to one
     * rounding that stays far from every midpoint), four times over. */
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = 3.0f * qlt_nf4_codebook[(i * 7) % 16];
    qlt_nf4 q;
    cr_assert_eq(qlt_nf4_alloc_host(&q, 64, 64, 0), 0);
    qlt_nf4_quantize_f32(&q, x);
    cr_assert_eq(q.absmax[0], 3.0f);
    for (int i = 0; i < 32; i++) {
        uint8_t want = (uint8_t)((((2 * i) * 7) % 16) << 4 | (((2 * i + 1) * 7) % 16));
        cr_assert_eq(q.codes[i], want, "byte %d: 0x%02x, want 0x%02x", i, q.codes[i], want);
    }
    float out[64];
    qlt_nf4_dequantize_f32(&q, out);
    for (int i = 0; i < 64; i++) cr_assert_eq(out[i], x[i], "element %d", i);
    qlt_nf4_free_host(&q);
}

Test(nf4, zero_blocks_store_code_zero_like_bnb) {
    /* absmax 0 -> bnb multiplies by 1/0 = inf: 0 * inf = NaN -> code 0 in both nibbles; dequantized as
     * -1 * 0 = -0. */
    float x[128] = {0};
    for (int i = 64; i < 128; i++) x[i] = (float)(i - 100) / 8.0f;
    qlt_nf4 q;
    cr_assert_eq(qlt_nf4_alloc_host(&q, 128, 64, 0), 0);
    qlt_nf4_quantize_f32(&q, x);
    cr_assert_eq(q.absmax[0], 0.0f);
    for (int i = 0; i < 32; i++) cr_assert_eq(q.codes[i], 0x00);
    float out[128];
    qlt_nf4_dequantize_f32(&q, out);
    for (int i = 0; i < 64; i++) cr_assert(out[i] == 0.0f && signbit(out[i]), "element %d", i);
    qlt_nf4_free_host(&q);
}

Test(nf4, ragged_last_block_and_odd_count) {
    /* 99 values, blocksize 64: block 1 holds 35 values; the 100th (padding) nibble is code(0) = 7. */
    rng r = {7};
    float x[99];
    for (int i = 0; i < 99; i++) x[i] = normal(&r);
    qlt_nf4 q;
    cr_assert_eq(qlt_nf4_alloc_host(&q, 99, 64, 0), 0);
    cr_assert_eq(q.nblocks, 2);
    qlt_nf4_quantize_f32(&q, x);
    float m = 0;
    for (int i = 64; i < 99; i++) m = fmaxf(m, fabsf(x[i]));
    cr_assert_eq(q.absmax[1], m);
    cr_assert_eq(q.codes[49] & 0x0f, 7);
    cr_assert_eq(q.codes[49] >> 4, qlt_nf4_code_of(x[98] * (1.0f / m)));
    /* a ragged block of zeros: absmax 0, and the padding nibble is code 0 too */
    float z[65] = {0};
    z[0] = 1.0f;
    qlt_nf4 qz;
    cr_assert_eq(qlt_nf4_alloc_host(&qz, 65, 64, 0), 0);
    qlt_nf4_quantize_f32(&qz, z);
    cr_assert_eq(qz.absmax[1], 0.0f);
    cr_assert_eq(qz.codes[32], 0x00);
    qlt_nf4_free_host(&q);
    qlt_nf4_free_host(&qz);
}

static void check_error_bound(const float *x, int64_t n, int blocksize, int double_quant) {
    qlt_nf4 q;
    cr_assert_eq(qlt_nf4_alloc_host(&q, n, blocksize, double_quant), 0);
    qlt_nf4_quantize_f32(&q, x);
    float *out = malloc((size_t)n * sizeof(float));
    float *scale = malloc((size_t)q.nblocks * sizeof(float));
    qlt_nf4_dequantize_f32(&q, out);
    qlt_nf4_absmax_f32(&q, scale);
    const double half_gap = 0.5 * qlt_nf4_max_gap();
    for (int64_t i = 0; i < n; i++) {
        int64_t b = i / blocksize;
        double true_absmax = 0;
        for (int64_t j = b * blocksize; j < n && j < (b + 1) * blocksize; j++)
            true_absmax = fmax(true_absmax, fabs(x[j]));
        if (!double_quant) {
            cr_assert_eq(scale[b], (float)true_absmax);
            double bound = half_gap * true_absmax * (1 + 1e-6) + 1e-30;
            cr_assert(fabs((double)x[i] - out[i]) <= bound, "element %lld: %g -> %g (absmax %g)", (long long)i,
                      x[i], out[i], true_absmax);
        } else {
            /* with the scale's own error on top: |x - c*s'| <= |x - c*s| + |c|*|s - s'| */
            double bound = half_gap * true_absmax * (1 + 1e-6) + fabs((double)scale[b] - true_absmax) + 1e-30;
            cr_assert(fabs((double)x[i] - out[i]) <= bound, "element %lld: %g -> %g", (long long)i, x[i], out[i]);
        }
    }
    free(out);
    free(scale);
    qlt_nf4_free_host(&q);
}

Test(nf4, error_bound_normal_heavy_tailed_ragged) {
    rng r = {42};
    int64_t n = 64 * 257 + 13;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = 0.02f * normal(&r);
    check_error_bound(x, n, 64, 0);
    check_error_bound(x, n, 64, 1);
    check_error_bound(x, n, 32, 0);
    check_error_bound(x, n, 4096, 1);
    for (int64_t i = 0; i < n; i++) x[i] = heavy(&r);
    for (int64_t i = 640; i < 1280; i++) x[i] = 0.0f; /* ten zero blocks */
    check_error_bound(x, n, 64, 0);
    check_error_bound(x, n, 128, 1);
    free(x);
}

Test(nf4, dynamic_map_matches_bitsandbytes) {
    /* bnb create_dynamic_map() (torch on x86), values as bitsandbytes stores them in nested_quant_map:
     * 127 negative values, then 0; the positive half mirrors them and ends with 1.0. */
    static const uint32_t want[128] = {
        0xbf7e3333, 0xbf7a999a, 0xbf770000, 0xbf736666, 0xbf6fcccd, 0xbf6c3333, 0xbf68999a, 0xbf650000,
        0xbf616666, 0xbf5dcccd, 0xbf5a3333, 0xbf56999a, 0xbf530000, 0xbf4f6666, 0xbf4bcccd, 0xbf483333,
        0xbf44999a, 0xbf410000, 0xbf3d6666, 0xbf39cccd, 0xbf363334, 0xbf32999a, 0xbf2f0000, 0xbf2b6666,
        0xbf27cccd, 0xbf243334, 0xbf20999a, 0xbf1d0000, 0xbf196666, 0xbf15cccd, 0xbf123334, 0xbf0e999a,
        0xbf0b0000, 0xbf076666, 0xbf03cccc, 0xbf003333, 0xbef93332, 0xbef20000, 0xbeeacccc, 0xbee3999a,
        0xbedc6666, 0xbed53333, 0xbece0000, 0xbec6cccc, 0xbebf999a, 0xbeb86666, 0xbeb13333, 0xbeaa0000,
        0xbea2cccc, 0xbe9b999a, 0xbe946666, 0xbe8d3334, 0xbe860000, 0xbe7d9999, 0xbe6f3333, 0xbe60cccd,
        0xbe526666, 0xbe440000, 0xbe35999a, 0xbe273333, 0xbe18cccd, 0xbe0a6666, 0xbdf80000, 0xbddb3334,
        0xbdc9eb85, 0xbdc428f7, 0xbdbe6667, 0xbdb8a3d7, 0xbdb2e148, 0xbdad1eb8, 0xbda75c2a, 0xbda1999a,
        0xbd9bd70a, 0xbd96147b, 0xbd9051eb, 0xbd8a8f5d, 0xbd84cccd, 0xbd7e147b, 0xbd728f5d, 0xbd670a3d,
        0xbd5b851f, 0xbd500000, 0xbd447ae1, 0xbd38f5c3, 0xbd2d70a3, 0xbd21eb85, 0xbd166667, 0xbd0ae148,
        0xbcfeb852, 0xbce7ae15, 0xbcd0a3d7, 0xbcb9999a, 0xbca28f5d, 0xbc8b851f, 0xbc68f5c3, 0xbc3ae148,
        0xbc1f3b64, 0xbc160418, 0xbc0ccccd, 0xbc039581, 0xbbf4bc6a, 0xbbe24dd3, 0xbbcfdf3b, 0xbbbd70a4,
        0xbbab020d, 0xbb989374, 0xbb8624dd, 0xbb676c8a, 0xbb428f5c, 0xbb1db22d, 0xbaf1a9fc, 0xbaa7ef9d,
        0xba7765ff, 0xba59e83e, 0xba3c6a80, 0xba1eecc1, 0xba016f01, 0xb9c7e283, 0xb98ce705, 0xb923d70b,
        0xb8ba1f4b, 0xb88aefb3, 0xb8378034, 0xb7b24206, 0xb70205ff, 0xb65a1a94, 0xb513a3b7, 0x00000000,
    };
    float map[256];
    qlt_nf4_dynamic_map(map);
    for (int i = 0; i < 128; i++) cr_assert_eq(bits_of(map[i]), want[i], "map[%d] = %08x", i, bits_of(map[i]));
    for (int i = 0; i < 127; i++) cr_assert_eq(map[254 - i], -float_of(want[i]), "map[%d]", 254 - i);
    cr_assert_eq(map[255], 1.0f);
}

Test(nf4, dynamic_search_is_bnb_dquantize) {
    float map[256];
    qlt_nf4_dynamic_map(map);
    for (int i = 0; i < 256; i++) cr_assert_eq(qlt_nf4_dynamic_code_of(map, map[i]), i, "code %d", i);
    cr_assert_eq(qlt_nf4_dynamic_code_of(map, 1.0f), 255);
    cr_assert_eq(qlt_nf4_dynamic_code_of(map, -1.0f), 0);
    cr_assert_eq(qlt_nf4_dynamic_code_of(map, NAN), 0);
    /* every value in [-1, 1] lands on a neighbour, and within half the largest gap */
    float gap = 0;
    for (int i = 0; i < 255; i++) gap = fmaxf(gap, map[i + 1] - map[i]);
    rng r = {3};
    for (int k = 0; k < 200000; k++) {
        float x = (float)(2 * uniform(&r) - 1);
        if (k % 2) x *= powf(10.0f, -(float)(k % 7)); /* every decade of the map */
        uint8_t c = qlt_nf4_dynamic_code_of(map, x);
        cr_assert(fabsf(map[c] - x) <= 0.5f * gap * 1.0001f, "x %g -> code %d (%g)", x, c, map[c]);
        /* a tie at an exact midpoint keeps the pivot; elsewhere the pick is the nearest value */
        int nearest = 0;
        for (int i = 1; i < 256; i++)
            if (fabsf(map[i] - x) < fabsf(map[nearest] - x)) nearest = i;
        if (fabsf(map[nearest] - x) < fabsf(map[c] - x)) {
            float mid = (map[nearest] + map[c]) * 0.5f;
            cr_assert(fabsf(x - mid) <= 2 * FLT_EPSILON * fabsf(mid) + FLT_MIN, "x %g: %d vs nearest %d", x, c,
                      nearest);
        }
    }
}

Test(nf4, double_quant_absmax_error_bounded) {
    rng r = {11};
    int64_t nblocks = 256 * 5 + 77, n = nblocks * 64;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = 0.01f * (1 + (i / 64) % 9) * heavy(&r);
    qlt_nf4 q;
    cr_assert_eq(qlt_nf4_alloc_host(&q, n, 64, 1), 0);
    qlt_nf4_quantize_f32(&q, x);
    float *plain = malloc((size_t)nblocks * sizeof(float)), *dq = malloc((size_t)nblocks * sizeof(float));
    qlt_nf4_quantize_codes(q.codes, plain, x, n, 64);
    qlt_nf4_absmax_f32(&q, dq);
    float map[256];
    qlt_nf4_dynamic_map(map);
    float gap = 0;
    for (int i = 0; i < 255; i++) gap = fmaxf(gap, map[i + 1] - map[i]);
    double mean = 0;
    for (int64_t i = 0; i < nblocks; i++) mean += plain[i];
    mean /= (double)nblocks;
    cr_assert_eq(q.offset, (float)mean);
    for (int64_t i = 0; i < nblocks; i++) {
        float s = q.nested_absmax[i / 256];
        double bound = 0.5 * gap * s * 1.0001 + 4 * FLT_EPSILON * fabs(plain[i]);
        cr_assert(fabs((double)dq[i] - plain[i]) <= bound, "block %lld: %g vs %g", (long long)i, dq[i], plain[i]);
    }
    /* a nested block whose values all equal the offset: nested absmax 0, codes 0, scale back = offset */
    float same[300];
    for (int i = 0; i < 300; i++) same[i] = 0.5f;
    qlt_nf4 q2;
    cr_assert_eq(qlt_nf4_alloc_host(&q2, 300 * 64, 64, 1), 0);
    qlt_nf4_double_quant(&q2, same, 0.5f);
    cr_assert_eq(q2.nested_absmax[0], 0.0f);
    cr_assert_eq(q2.absmax_q[0], 0);
    float back[300];
    qlt_nf4_absmax_f32(&q2, back);
    for (int i = 0; i < 300; i++) cr_assert_eq(back[i], 0.5f);
    qlt_nf4_free_host(&q2);
    free(x);
    free(plain);
    free(dq);
    qlt_nf4_free_host(&q);
}

/* The float32 dequantization (a 16-entry table a block, expanded 16 codes at a time with AVX2 where the CPU
 * has it) gives every element bit for bit as the formula: T(code[q] * absmax) with subnormals flushed like
 * mul.ftz, absmax from qlt_nf4_absmax_f32. Blocksizes 32..4096, with and without double quant, a ragged odd
 * count, a block of zeros and one with a subnormal-sized scale, large enough to run across threads. */
static float flush(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

Test(nf4, dequantize_f32_is_the_formula_bit_for_bit) {
    const int blocksizes[] = {32, 64, 256, 4096};
    rng r = {17};
    const int64_t n = 70001; /* odd, and no blocksize divides it */
    float *x = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = normal(&r);
    for (int64_t i = 0; i < 4096; i++) x[i] = 0.0f;                /* all-zero blocks */
    for (int64_t i = 4096; i < 4096 + 32; i++) x[i] *= 1e-39f;     /* a subnormal block */
    for (size_t bi = 0; bi < sizeof blocksizes / sizeof blocksizes[0]; bi++)
        for (int dq = 0; dq < 2; dq++) {
            qlt_nf4 q;
            cr_assert_eq(qlt_nf4_alloc_host(&q, n, blocksizes[bi], dq), 0);
            qlt_nf4_quantize_f32(&q, x);
            float *scale = malloc(sizeof(float) * (size_t)q.nblocks);
            qlt_nf4_absmax_f32(&q, scale);
            qlt_nf4_dequantize_f32(&q, out);
            int64_t wrong = 0;
            for (int64_t i = 0; i < n; i++) {
                uint8_t byte = q.codes[i / 2];
                float c = qlt_nf4_codebook[(i & 1) ? (byte & 0x0f) : (byte >> 4)];
                float want = flush(flush(c) * flush(scale[i / blocksizes[bi]]));
                wrong += memcmp(&want, &out[i], sizeof want) != 0;
            }
            cr_expect_eq(wrong, 0, "blocksize %d double_quant %d: %lld values differ from the formula", blocksizes[bi],
                         dq, (long long)wrong);
            free(scale);
            qlt_nf4_free_host(&q);
        }
    free(x);
    free(out);
}

Test(nf4, dequantize_bf16_f16_round_the_f32_values) {
    rng r = {5};
    int64_t n = 1000;
    float x[1000], f[1000];
    uint16_t b[1000], h[1000];
    for (int i = 0; i < n; i++) x[i] = normal(&r);
    qlt_nf4 q;
    cr_assert_eq(qlt_nf4_alloc_host(&q, n, 128, 1), 0);
    qlt_nf4_quantize_f32(&q, x);
    qlt_nf4_dequantize_f32(&q, f);
    qlt_nf4_dequantize_bf16(&q, b);
    qlt_nf4_dequantize_f16(&q, h);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(b[i], qlt_f32_to_bf16(f[i]));
        cr_assert_eq(h[i], qlt_f32_to_f16(f[i]));
    }
    qlt_nf4_free_host(&q);
}

Test(nf4, quantize_from_bf16_equals_quantize_of_its_f32) {
    rng r = {9};
    uint16_t b[640];
    float f[640];
    for (int i = 0; i < 640; i++) {
        b[i] = qlt_f32_to_bf16(normal(&r));
        f[i] = qlt_bf16_to_f32(b[i]);
    }
    qlt_nf4 q1, q2;
    cr_assert_eq(qlt_nf4_alloc_host(&q1, 640, 64, 1), 0);
    cr_assert_eq(qlt_nf4_alloc_host(&q2, 640, 64, 1), 0);
    qlt_nf4_quantize(&q1, b, QLT_DTYPE_BF16);
    qlt_nf4_quantize_f32(&q2, f);
    cr_assert_eq(memcmp(q1.codes, q2.codes, 320), 0);
    cr_assert_eq(memcmp(q1.absmax_q, q2.absmax_q, 10), 0);
    cr_assert_eq(q1.offset, q2.offset);
    qlt_nf4_free_host(&q1);
    qlt_nf4_free_host(&q2);
}

Test(nf4, subnormals_flush_like_fast_math) {
    /* A block whose largest value is subnormal: bnb's max.ftz sees 0 -> absmax 0 -> codes 0. */
    float x[64] = {0};
    x[3] = 1e-40f;
    x[4] = -1e-39f;
    uint8_t codes[32];
    float absmax;
    qlt_nf4_quantize_codes(codes, &absmax, x, 64, 64);
    cr_assert_eq(absmax, 0.0f);
    for (int i = 0; i < 32; i++) cr_assert_eq(codes[i], 0);
    cr_assert(isinf(qlt_nf4_bnb_rcp(1e-39f)));
    cr_assert_eq(qlt_nf4_bnb_rcp(2.0f), 0.5f);
    cr_assert_eq(qlt_nf4_bnb_rcp(1e38f), 0.0f); /* 1e-38 is subnormal: flushed */
}

Test(nf4, bytes_and_blocksizes) {
    cr_assert_eq(qlt_nf4_bytes(4096, 64, 0), 2048 + 64 * 4);
    cr_assert_eq(qlt_nf4_bytes(4096, 64, 1), 2048 + 64 + 4 + 4);
    cr_assert_eq(qlt_nf4_bytes(99, 64, 0), 50 + 8);
    cr_assert_eq(qlt_nf4_check_blocksize(64), 0);
    cr_assert_eq(qlt_nf4_check_blocksize(4096), 0);
    cr_assert_eq(qlt_nf4_check_blocksize(48), -1);
    cr_assert(strstr(qlt_error(), "48"));
    cr_assert_eq(qlt_nf4_check_blocksize(16), -1);
    cr_assert_eq(qlt_nf4_check_blocksize(8192), -1);
    qlt_nf4 q;
    cr_assert_eq(qlt_nf4_alloc_host(&q, 10, 100, 1), -1);
    cr_assert_gt(qlt_nf4_max_gap(), 0.30f);
    cr_assert_lt(qlt_nf4_max_gap(), 0.31f);
}

/* The CPU emulation of the GPU's rcp.approx.ftz.f32 (nf4_rcp_table.c, measured on an H100): mantissa
 * 0x0005a9 is one of its measured exceptions (one ulp below the correctly rounded reciprocal), mantissa 0
 * (powers of two) is exact, and the exponent does not matter. */
Test(nf4, rcp_emulation_table) {
    for (int e = 100; e <= 140; e += 10) {
        uint32_t bits = ((uint32_t)e << 23) | 0x0005a9u;
        float x, ieee;
        memcpy(&x, &bits, 4);
        ieee = 1.0f / x;
        uint32_t ib, gb;
        float gpu = qlt_nf4_bnb_rcp(x);
        memcpy(&ib, &ieee, 4);
        memcpy(&gb, &gpu, 4);
        cr_assert_eq(gb, ib - 1, "exponent %d: rcp bits %08x, correctly rounded %08x", e, gb, ib);
        bits = (uint32_t)e << 23;
        memcpy(&x, &bits, 4);
        cr_assert_eq(qlt_nf4_bnb_rcp(x), 1.0f / x);
    }
}

/* The CPU backend's peak_bytes counts NF4 weight storage (codes, codebook, absmax and the nested ones) and
 * the dequantization scratch, as the CUDA backend counts its device memory; freeing gives it back. */
Test(nf4, cpu_peak_bytes_count_nf4_weights) {
    const int64_t rows = 256, cols = 96, numel = rows * cols;
    float *x = malloc(sizeof(float) * (size_t)numel);
    for (int64_t i = 0; i < numel; i++) x[i] = (float)((i * 37) % 101 - 50) / 50.0f;
    for (int dq = 0; dq < 2; dq++) {
        qlt_backend *be = qlt_backend_cpu_create(1, 1);
        cr_assert_eq(be->peak_bytes(be), 0);
        qlt_weight w;
        cr_assert_eq(be->weight_create(be, &w, x, QLT_DTYPE_F32, rows, cols, 64, dq), 0, "%s", qlt_error());
        int64_t nblocks = numel / 64, nested = (nblocks + 255) / 256;
        int64_t nf4 = numel / 2 + 16 * 4 + (dq ? nblocks + 4 * (nested + 256) : 4 * nblocks);
        int64_t want = nf4 + 4 * numel; /* + the float32 dequantization scratch for one [rows, cols] weight */
        cr_expect_eq((int64_t)be->peak_bytes(be), want, "double_quant %d: peak %lld, want %lld", dq,
                     (long long)be->peak_bytes(be), (long long)want);
        be->weight_free(be, &w); /* gives the NF4 bytes back: a second weight does not raise the peak */
        cr_assert_eq(be->weight_create(be, &w, x, QLT_DTYPE_F32, rows, cols, 64, dq), 0, "%s", qlt_error());
        cr_expect_eq((int64_t)be->peak_bytes(be), want);
        be->weight_free(be, &w);
        be->destroy(be);
    }
    free(x);
}
