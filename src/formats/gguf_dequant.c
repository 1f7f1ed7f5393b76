/* gguf_dequant.c: one function per ggml block type, each turning one block into float32 with the same
 * float operations, in the same order, as llama.cpp's dequantize_row_* (see gguf_dequant.h for the
 * layouts). A product and a sum are two roundings there, so the compiler must not fuse them into one
 * FMA here either: contraction is switched off for this file. */
#include "formats/gguf_dequant.h"

#include <string.h>

#include "common/dtype.h"
#include "common/error.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return qlt_f16_to_f32(h);
}

/* y [32]: d, qs[16]. */
static void block_q4_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0x0F) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

/* y [32]: d, m, qs[16]. */
static void block_q4_1(const uint8_t *b, float *y) {
    const float d = half_at(b), m = half_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0x0F) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

/* The fifth bits of a Q5 block: bit j of the little-endian u32 qh belongs to value j. */
static uint32_t q5_high_bits(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* y [32]: d, qh[4], qs[16]. */
static void block_q5_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    const uint32_t qh = q5_high_bits(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (int)(qs[j] & 0x0F) | (int)((qh >> j) & 1u) << 4;
        int hi = (int)(qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
        y[j] = (float)(lo - 16) * d;
        y[j + 16] = (float)(hi - 16) * d;
    }
}

/* y [32]: d, m, qh[4], qs[16]. */
static void block_q5_1(const uint8_t *b, float *y) {
    const float d = half_at(b), m = half_at(b + 2);
    const uint32_t qh = q5_high_bits(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int lo = (int)(qs[j] & 0x0F) | (int)((qh >> j) & 1u) << 4;
        int hi = (int)(qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
        y[j] = (float)lo * d + m;
        y[j + 16] = (float)hi * d + m;
    }
}

/* y [32]: d, qs[32] int8. */
static void block_q8_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

/* Sub-block j's 6-bit scale and min (j < 8) from the 12 packed bytes of a Q4_K / Q5_K block: bytes 0-3
 * hold scales 0-3 in their low 6 bits, bytes 4-7 mins 0-3; sub-blocks 4-7 keep their low 4 bits in bytes
 * 8-11 (scale low nibble, min high nibble) and their top 2 bits in the top bits of bytes 0-7. */
static void k_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* y [256]: d, dmin, scales[12], qs[128]; qs byte l of chunk c (32 bytes) holds values 64c + l (low
 * nibble, sub-block 2c) and 64c + 32 + l (high nibble, sub-block 2c + 1). */
static void block_q4_k(const uint8_t *b, float *y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int c = 0; c < 4; c++, q += 32, y += 64) {
        int sc, mn;
        k_scale_min(scales, 2 * c, &sc, &mn);
        const float d1 = d * (float)sc, m1 = dmin * (float)mn;
        k_scale_min(scales, 2 * c + 1, &sc, &mn);
        const float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++) y[l] = d1 * (float)(q[l] & 0x0F) - m1;
        for (int l = 0; l < 32; l++) y[32 + l] = d2 * (float)(q[l] >> 4) - m2;
    }
}

/* y [256]: d, dmin, scales[12], qh[32], qs[128]; as Q4_K, with value 64c + l's fifth bit in bit 2c of
 * qh[l] and value 64c + 32 + l's in bit 2c + 1. */
static void block_q5_k(const uint8_t *b, float *y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *q = b + 48;
    for (int c = 0; c < 4; c++, q += 32, y += 64) {
        int sc, mn;
        k_scale_min(scales, 2 * c, &sc, &mn);
        const float d1 = d * (float)sc, m1 = dmin * (float)mn;
        k_scale_min(scales, 2 * c + 1, &sc, &mn);
        const float d2 = d * (float)sc, m2 = dmin * (float)mn;
        const uint8_t bit_lo = (uint8_t)(1u << (2 * c)), bit_hi = (uint8_t)(2u << (2 * c));
        for (int l = 0; l < 32; l++) y[l] = d1 * (float)((q[l] & 0x0F) + (qh[l] & bit_lo ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) y[32 + l] = d2 * (float)((q[l] >> 4) + (qh[l] & bit_hi ? 16 : 0)) - m2;
    }
}

/* y [256]: ql[128], qh[64], scales[16] int8, d. Each half h (128 values) uses ql[64h .. 64h+64),
 * qh[32h .. 32h+32) and scales[8h .. 8h+8): value 32k + l of the half (k < 4, l < 32) takes its low 4 bits
 * from ql[l + 32 (k & 1)] (low nibble for k < 2, high for k >= 2), its top 2 bits from bits 2k of qh[l],
 * and scale 2k + l / 16. */
static void block_q6_k(const uint8_t *b, float *y) {
    const float d = half_at(b + 208);
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0x0F) | ((qh[l] >> 0) & 3) << 4) - 32;
            const int q2 = ((ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4) - 32;
            const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            y[l] = d * (float)sc[is + 0] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

typedef void (*block_fn)(const uint8_t *b, float *y);

static block_fn block_fn_of(uint32_t type) {
    switch (type) {
    case QLT_GGML_Q4_0: return block_q4_0;
    case QLT_GGML_Q4_1: return block_q4_1;
    case QLT_GGML_Q5_0: return block_q5_0;
    case QLT_GGML_Q5_1: return block_q5_1;
    case QLT_GGML_Q8_0: return block_q8_0;
    case QLT_GGML_Q4_K: return block_q4_k;
    case QLT_GGML_Q5_K: return block_q5_k;
    case QLT_GGML_Q6_K: return block_q6_k;
    default: return NULL;
    }
}

int qlt_gguf_can_dequantize(uint32_t type) {
    return type == QLT_GGML_F32 || type == QLT_GGML_F16 || type == QLT_GGML_BF16 || block_fn_of(type) != NULL;
}

#define CHUNK_BLOCKS 1024 /* blocks per OpenMP work item */

void qlt_gguf_dequantize(uint32_t type, const void *src, float *dst, int64_t n) {
    QLT_ASSERT(qlt_gguf_can_dequantize(type));
    const uint8_t *s = src;
    if (type == QLT_GGML_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
        return;
    }
    if (type == QLT_GGML_F16 || type == QLT_GGML_BF16) {
        qlt_convert_to_f32(dst, src, type == QLT_GGML_F16 ? QLT_DTYPE_F16 : QLT_DTYPE_BF16, (size_t)n);
        return;
    }
    const block_fn fn = block_fn_of(type);
    const int64_t block = qlt_ggml_type_block(type), bytes = qlt_ggml_type_block_bytes(type);
    QLT_ASSERT(n % block == 0);
    const int64_t n_blocks = n / block, n_chunks = (n_blocks + CHUNK_BLOCKS - 1) / CHUNK_BLOCKS;
#pragma omp parallel for schedule(static) if (n_chunks > 1)
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t end = (c + 1) * CHUNK_BLOCKS < n_blocks ? (c + 1) * CHUNK_BLOCKS : n_blocks;
        for (int64_t i = c * CHUNK_BLOCKS; i < end; i++) fn(s + i * bytes, dst + i * block);
    }
}

int qlt_gguf_tensor_to_f32(const qlt_gguf *g, const qlt_gguf_tensor *t, float *dst) {
    if (!qlt_gguf_can_dequantize(t->type))
        return qlt_fail("%s: tensor '%s' has ggml type %s (%u), which qlora-train does not read (supported: F32, F16, "
                        "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K); convert the model to one of these "
                        "with llama.cpp's llama-quantize", g->path, t->name, qlt_ggml_type_name(t->type), t->type);
    qlt_gguf_dequantize(t->type, t->data, dst, t->numel);
    return 0;
}
