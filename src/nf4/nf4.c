/* nf4.c: NF4 quantize / dequantize on the host, reproducing bitsandbytes' CUDA kernels operation by
 * operation (including their fast-math flush-to-zero and approximate reciprocal), so its bytes are the
 * oracle for src/cuda/nf4.cu and match what bitsandbytes writes. Every float operation below is one
 * IEEE single operation: no expression here may be contracted into an fma (x86-64 without -mfma cannot,
 * and the GPU checks would catch it). */
#include "nf4/nf4.h"

#include "nf4/nf4_search.h"

#include <pthread.h>
#include <zlib.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

const float qlt_nf4_codebook[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

/* ---- fast-math emulation: what the .ftz PTX instructions do to subnormal inputs and results ---- */

static inline float ftz(float x) {
    return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; /* NaN passes through */
}
static inline float mul_ftz(float a, float b) { return ftz(ftz(a) * ftz(b)); }
static inline float absmax_step(float m, float x) { return fmaxf(m, ftz(fabsf(x))); }

/* Where the GPU's rcp.approx.ftz.f32 differs from correct rounding: a 2-bit code per input mantissa,
 * zlib-compressed in nf4_rcp_table.c, inflated once (thread-safe) on first use. */
extern const size_t qlt_nf4_rcp_map_bytes, qlt_nf4_rcp_map_z_len;
extern const unsigned char qlt_nf4_rcp_map_z[];

static uint8_t *rcp_map;
static pthread_once_t rcp_map_once = PTHREAD_ONCE_INIT;

static void rcp_map_inflate(void) {
    uLongf len = (uLongf)qlt_nf4_rcp_map_bytes;
    uint8_t *map = qlt_xmalloc(qlt_nf4_rcp_map_bytes);
    QLT_ASSERT(uncompress(map, &len, qlt_nf4_rcp_map_z, (uLong)qlt_nf4_rcp_map_z_len) == Z_OK &&
               len == (uLongf)qlt_nf4_rcp_map_bytes);
    rcp_map = map;
}

float qlt_nf4_bnb_rcp(float a) {
    a = ftz(a);
    if (a == 0.0f) return copysignf(INFINITY, a);
    float r = 1.0f / a;
    if (isfinite(a) && r != 0.0f) {
        pthread_once(&rcp_map_once, rcp_map_inflate);
        uint32_t bits;
        memcpy(&bits, &a, 4);
        uint32_t mant = bits & 0x7fffffu;
        int code = (rcp_map[mant >> 2] >> ((mant & 3) * 2)) & 3;
        if (code) {
            uint32_t rb;
            memcpy(&rb, &r, 4);
            rb = code == 1 ? rb + 1 : rb - 1; /* same sign: the magnitude moves by one ulp */
            memcpy(&r, &rb, 4);
        }
    }
    return ftz(r);
}

/* ---- the two code searches (shared with the CUDA kernels: nf4/nf4_search.h) ---- */

uint8_t qlt_nf4_code_of(float x) { return qlt_nf4_tree_code(x); }

uint8_t qlt_nf4_dynamic_code_of(const float code[256], float x) { return qlt_nf4_dynamic_search(code, x); }

/* ---- maps ---- */

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void qlt_nf4_dynamic_map(float out[256]) {
    /* create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for i in 0..6, the midpoints of
     * torch.linspace(0.1, 1, 2^i + 1) (float32), times +-10^(i-6) (a Python float rounded to float32,
     * multiplied in float32); then 0 and 1; sorted. torch's linspace: step = (1 - 0.1f) / (steps - 1),
     * element k = start + step*k below steps/2 and end - step*(steps-1-k) above, each an fma on x86. */
    int n = 0;
    for (int i = 0; i < 7; i++) {
        int steps = (1 << i) + 1;
        float b[65];
        const float start = 0.1f, end = 1.0f;
        float step = (end - start) / (float)(steps - 1);
        for (int k = 0; k < steps; k++)
            b[k] = k < steps / 2 ? fmaf(step, (float)k, start) : fmaf(-step, (float)(steps - k - 1), end);
        float scale = (float)pow(10.0, (double)(i - 6));
        for (int k = 0; k + 1 < steps; k++) out[n++] = scale * ((b[k] + b[k + 1]) / 2.0f);
        for (int k = 0; k + 1 < steps; k++) out[n++] = -scale * ((b[k] + b[k + 1]) / 2.0f);
    }
    out[n++] = 0.0f;
    out[n++] = 1.0f;
    QLT_ASSERT(n == 256);
    qsort(out, 256, sizeof(float), cmp_float);
}

int qlt_nf4_check_blocksize(int blocksize) {
    if (blocksize < 32 || blocksize > 4096 || (blocksize & (blocksize - 1)) != 0)
        return qlt_fail("NF4 blocksize %d is not supported: use a power of two from 32 to 4096 (bitsandbytes "
                        "accepts those; 64 is the default)",
                        blocksize);
    return 0;
}

float qlt_nf4_max_gap(void) {
    float g = 0.0f;
    for (int i = 0; i < 15; i++)
        if (qlt_nf4_codebook[i + 1] - qlt_nf4_codebook[i] > g) g = qlt_nf4_codebook[i + 1] - qlt_nf4_codebook[i];
    return g;
}

/* ---- sizes and allocation ---- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t qlt_nf4_bytes(int64_t numel, int blocksize, int double_quant) {
    int64_t nblocks = ceil_div(numel, blocksize);
    int64_t bytes = ceil_div(numel, 2);
    if (double_quant)
        bytes += nblocks + 4 * ceil_div(nblocks, QLT_NF4_NESTED_BLOCKSIZE) + 4;
    else
        bytes += 4 * nblocks;
    return bytes;
}

int qlt_nf4_shape(qlt_nf4 *q, int64_t numel, int blocksize, int double_quant) {
    memset(q, 0, sizeof *q);
    QLT_TRY(qlt_nf4_check_blocksize(blocksize));
    if (numel <= 0) return qlt_fail("NF4: cannot quantize a tensor of %lld values", (long long)numel);
    q->numel = numel;
    q->blocksize = blocksize;
    q->nblocks = ceil_div(numel, blocksize);
    q->double_quant = double_quant ? 1 : 0;
    q->nested_blocksize = QLT_NF4_NESTED_BLOCKSIZE;
    if (q->double_quant) q->nested_nblocks = ceil_div(q->nblocks, QLT_NF4_NESTED_BLOCKSIZE);
    return 0;
}

int qlt_nf4_alloc_host(qlt_nf4 *q, int64_t numel, int blocksize, int double_quant) {
    QLT_TRY(qlt_nf4_shape(q, numel, blocksize, double_quant));
    q->codes = qlt_xmalloc((size_t)ceil_div(numel, 2));
    q->code = qlt_xmalloc(16 * sizeof(float));
    memcpy(q->code, qlt_nf4_codebook, sizeof qlt_nf4_codebook);
    if (q->double_quant) {
        q->absmax_q = qlt_xmalloc((size_t)q->nblocks);
        q->nested_absmax = qlt_xmalloc((size_t)q->nested_nblocks * sizeof(float));
        q->nested_code = qlt_xmalloc(256 * sizeof(float));
        qlt_nf4_dynamic_map(q->nested_code);
    } else {
        q->absmax = qlt_xmalloc((size_t)q->nblocks * sizeof(float));
    }
    return 0;
}

void qlt_nf4_free_host(qlt_nf4 *q) {
    free(q->codes);
    free(q->code);
    free(q->absmax);
    free(q->absmax_q);
    free(q->nested_absmax);
    free(q->nested_code);
    memset(q, 0, sizeof *q);
}

/* ---- quantize ---- */

void qlt_nf4_quantize_codes(uint8_t *codes, float *absmax, const float *x, int64_t numel, int blocksize) {
    int64_t nblocks = ceil_div(numel, blocksize);
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t begin = b * blocksize, end = begin + blocksize < numel ? begin + blocksize : numel;
        float m = -FLT_MAX;
        for (int64_t i = begin; i < end; i++) m = absmax_step(m, x[i]);
        if (end - begin < blocksize) m = fmaxf(m, 0.0f); /* bnb's zero padding takes part in the max */
        absmax[b] = m;
        float inv = qlt_nf4_bnb_rcp(m);
        for (int64_t i = begin; i < end; i += 2) {
            uint8_t hi = qlt_nf4_code_of(mul_ftz(x[i], inv));
            uint8_t lo = qlt_nf4_code_of(mul_ftz(i + 1 < end ? x[i + 1] : 0.0f, inv));
            codes[i / 2] = (uint8_t)(hi << 4 | lo);
        }
    }
}

float qlt_nf4_absmax_mean(const float *a, int64_t n) {
    double total = 0.0;
    for (int64_t c = 0; c < n; c += QLT_NF4_MEAN_CHUNK) {
        int64_t end = c + QLT_NF4_MEAN_CHUNK < n ? c + QLT_NF4_MEAN_CHUNK : n;
        double part = 0.0;
        for (int64_t i = c; i < end; i++) part += (double)a[i];
        total += part;
    }
    return (float)(total / (double)n);
}

void qlt_nf4_double_quant(qlt_nf4 *q, const float *absmax, float offset) {
    QLT_ASSERT(q->double_quant && q->absmax_q && q->nested_absmax && q->nested_code);
    const int64_t n = q->nblocks, bs = QLT_NF4_NESTED_BLOCKSIZE;
    q->offset = offset;
    for (int64_t b = 0; b < q->nested_nblocks; b++) {
        int64_t begin = b * bs, end = begin + bs < n ? begin + bs : n;
        float m = -FLT_MAX;
        for (int64_t i = begin; i < end; i++) m = absmax_step(m, absmax[i] - offset);
        if (end - begin < bs) m = fmaxf(m, 0.0f);
        q->nested_absmax[b] = m;
        float inv = qlt_nf4_bnb_rcp(m);
        for (int64_t i = begin; i < end; i++)
            q->absmax_q[i] = qlt_nf4_dynamic_code_of(q->nested_code, mul_ftz(absmax[i] - offset, inv));
    }
}

void qlt_nf4_quantize_f32(qlt_nf4 *q, const float *x) {
    if (!q->double_quant) {
        qlt_nf4_quantize_codes(q->codes, q->absmax, x, q->numel, q->blocksize);
        return;
    }
    float *absmax = qlt_xmalloc((size_t)q->nblocks * sizeof(float));
    qlt_nf4_quantize_codes(q->codes, absmax, x, q->numel, q->blocksize);
    qlt_nf4_double_quant(q, absmax, qlt_nf4_absmax_mean(absmax, q->nblocks));
    free(absmax);
}

void qlt_nf4_quantize(qlt_nf4 *q, const void *x, qlt_dtype dtype) {
    if (dtype == QLT_DTYPE_F32) {
        qlt_nf4_quantize_f32(q, x);
        return;
    }
    QLT_ASSERT(qlt_dtype_is_float(dtype));
    float *f = qlt_xmalloc((size_t)q->numel * sizeof(float));
    qlt_convert_to_f32(f, x, dtype, (size_t)q->numel);
    qlt_nf4_quantize_f32(q, f);
    free(f);
}

/* ---- dequantize ---- */

void qlt_nf4_absmax_f32(const qlt_nf4 *q, float *out) {
    if (!q->double_quant) {
        memcpy(out, q->absmax, (size_t)q->nblocks * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < q->nblocks; i++)
        out[i] = mul_ftz(q->nested_code[q->absmax_q[i]], q->nested_absmax[i / q->nested_blocksize]) + q->offset;
}

typedef void (*store_fn)(void *out, int64_t i, float v);
static void store_bf16(void *out, int64_t i, float v) { ((uint16_t *)out)[i] = qlt_f32_to_bf16(v); }
static void store_f16(void *out, int64_t i, float v) { ((uint16_t *)out)[i] = qlt_f32_to_f16(v); }

/* What each of the 16 codes of a block with scale s dequantizes to: T(code * s) with mul.ftz, so a lookup in
 * this table gives every element of the block bit for bit. */
static void block_table(float table[16], float s) {
    for (int c = 0; c < 16; c++) table[c] = mul_ftz(qlt_nf4_codebook[c], s);
}

static void dequantize(const qlt_nf4 *q, void *out, store_fn store) {
    float *absmax = qlt_xmalloc((size_t)q->nblocks * sizeof(float));
    qlt_nf4_absmax_f32(q, absmax);
    /* bnb's kernel reads its built-in codebook, not quant_map: the loader checks they are equal. */
    for (int64_t b = 0; b < q->nblocks; b++) {
        float table[16];
        block_table(table, absmax[b]);
        int64_t end = (b + 1) * q->blocksize < q->numel ? (b + 1) * q->blocksize : q->numel;
        for (int64_t i = b * q->blocksize; i < end; i++) {
            uint8_t byte = q->codes[i / 2];
            store(out, i, table[(i & 1) ? (byte & 0x0f) : (byte >> 4)]);
        }
    }
    free(absmax);
}

/* float32 out [2 * bytes] from the codes of one block (bytes a multiple of 8), through its table. */
static void expand_block_scalar(float *out, const uint8_t *codes, int64_t bytes, const float table[16]) {
    for (int64_t j = 0; j < bytes; j++) {
        out[2 * j] = table[codes[j] >> 4];
        out[2 * j + 1] = table[codes[j] & 0x0f];
    }
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
/* The same with AVX2: 16 codes at a time, each looked up in the table's two halves (a permute each) and the
 * half picked by the code's bit 3. Chosen at run time when the CPU has AVX2. */
__attribute__((target("avx2"))) static void expand_block_avx2(float *out, const uint8_t *codes, int64_t bytes,
                                                              const float table[16]) {
    const __m256 low = _mm256_loadu_ps(table), high = _mm256_loadu_ps(table + 8);
    const __m128i nibble = _mm_set1_epi8(0x0f);
    for (int64_t j = 0; j < bytes; j += 8) {
        __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(codes + j));
        __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), nibble), lo = _mm_and_si128(b, nibble);
        __m128i idx = _mm_unpacklo_epi8(hi, lo); /* element order: high nibble first */
        for (int half = 0; half < 2; half++) {
            __m256i c = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(idx, 8) : idx);
            __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(low, c), _mm256_permutevar8x32_ps(high, c),
                                        _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
            _mm256_storeu_ps(out + 2 * j + 8 * half, v);
        }
    }
}
static int have_avx2(void) { return __builtin_cpu_supports("avx2"); }
#else
static void expand_block_avx2(float *out, const uint8_t *codes, int64_t bytes, const float table[16]) {
    expand_block_scalar(out, codes, bytes, table);
}
static int have_avx2(void) { return 0; }
#endif

/* Blocks across threads; whole blocks through the table expansion, a ragged last block element by element. */
void qlt_nf4_dequantize_f32(const qlt_nf4 *q, float *out) {
    float *absmax = qlt_xmalloc((size_t)q->nblocks * sizeof(float));
    qlt_nf4_absmax_f32(q, absmax);
    const int64_t bs = q->blocksize, full = q->numel / bs;
    void (*expand)(float *, const uint8_t *, int64_t, const float *) =
        have_avx2() ? expand_block_avx2 : expand_block_scalar;
#pragma omp parallel for schedule(static) if (q->numel > (1 << 16))
    for (int64_t b = 0; b < full; b++) {
        float table[16];
        block_table(table, absmax[b]);
        expand(out + b * bs, q->codes + b * bs / 2, bs / 2, table);
    }
    if (full < q->nblocks) {
        float table[16];
        block_table(table, absmax[full]);
        for (int64_t i = full * bs; i < q->numel; i++) {
            uint8_t byte = q->codes[i / 2];
            out[i] = table[(i & 1) ? (byte & 0x0f) : (byte >> 4)];
        }
    }
    free(absmax);
}

void qlt_nf4_dequantize_bf16(const qlt_nf4 *q, uint16_t *out) { dequantize(q, out, store_bf16); }
void qlt_nf4_dequantize_f16(const qlt_nf4 *q, uint16_t *out) { dequantize(q, out, store_f16); }
