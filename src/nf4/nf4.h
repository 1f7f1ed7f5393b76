/* nf4.h: the NF4 codec on the host, used by every backend and weight format: quantization bit-exact with
 * bitsandbytes' CUDA kernels (kQuantizeBlockwise / kDequantizeBlockwise, built with --use_fast_math), so a
 * model quantized here, on our GPU kernels (src/cuda/nf4.cu) and by bitsandbytes holds the same bytes.
 * docs/NF4.md has the format and every exactness note; the short version:
 *
 * - absmax[b] = max |x| over block b (the ragged last block also takes max with 0: bnb pads it with 0).
 * - code = bnb's fixed midpoint tree applied to x * rcp(absmax), where rcp and * are the fast-math PTX
 *   instructions bnb's kernel compiles to (rcp.approx.ftz.f32, mul.ftz.f32): subnormals flush to zero,
 *   absmax 0 gives x * inf = NaN -> code 0 (so an all-zero block stores 0x00 bytes, absmax 0).
 * - two codes a byte, element 2i in the high nibble; an odd numel pads the last low nibble with code(0).
 * - double quant: offset = mean(absmax) (our mean is a fixed-order double sum rounded to float: see
 *   qlt_nf4_absmax_mean), then (absmax - offset) quantized blockwise (256) to 8-bit codes of bnb's
 *   signed dynamic map with bnb's binary search (dQuantize), nested_absmax = max |absmax - offset|.
 * - dequantize: out = T(code[q] * absmax) (mul.ftz, then round to nearest even); nested absmax =
 *   nested_code[q8] * nested_absmax (mul.ftz) + offset.
 *
 * All pointers here are host memory. Sizes are 64-bit. */
#ifndef QLT_NF4_H
#define QLT_NF4_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

/* A quantized tensor in bitsandbytes' layout: the weight flattened row-major into blocks of `blocksize`
 * values, one absmax per block, 4-bit codes two per byte with the even element in the high nibble;
 * with double quantization the absmax values minus their mean are stored as 8-bit codes of
 * bitsandbytes' signed dynamic map, blockwise (nested_blocksize = 256) with one float32 scale a block. */
typedef struct qlt_nf4 {
    int64_t numel;
    int32_t blocksize;         /* 64 by default; 32..4096 */
    int64_t nblocks;           /* ceil(numel / blocksize) */
    uint8_t *codes;            /* [ceil(numel / 2)] packed 4-bit codes */
    float *code;               /* [16] the NF4 codebook (quant_map) */
    int double_quant;          /* 1: absmax_q / nested_* are used, 0: absmax is used */
    float *absmax;             /* [nblocks] float32 scales (double_quant == 0) */
    uint8_t *absmax_q;         /* [nblocks] 8-bit codes of (absmax - offset) (double_quant == 1) */
    int32_t nested_blocksize;  /* 256 */
    int64_t nested_nblocks;    /* ceil(nblocks / nested_blocksize) */
    float *nested_absmax;      /* [nested_nblocks] */
    float *nested_code;        /* [256] bitsandbytes' signed dynamic 8-bit map */
    float offset;              /* mean of absmax, added back after the nested dequantization */
} qlt_nf4;

#define QLT_NF4_DEFAULT_BLOCKSIZE 64
#define QLT_NF4_NESTED_BLOCKSIZE 256
/* Elements per partial sum of the deterministic absmax mean (CPU and GPU use the same order). */
#define QLT_NF4_MEAN_CHUNK 4096

/* The NF4 codebook (bnb's get_4bit_type("nf4")), index 0..15. */
extern const float qlt_nf4_codebook[16];

/* bnb's create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), float32, sorted. Computed
 * exactly as torch does it on x86 (float32 linspace whose `start + step * i` torch's AVX2 kernel
 * contracts into an fma), checked against the values bitsandbytes stores in checkpoints. */
void qlt_nf4_dynamic_map(float out[256]);

/* 0 if blocksize is one bnb accepts (a power of two in 32..4096), else -1 with qlt_fail. */
int qlt_nf4_check_blocksize(int blocksize);

/* Bytes the NF4 form of numel values takes: packed codes + absmax (float32, or 8-bit codes + nested
 * float32 absmax + one float32 offset with double quant). The two 16 / 256 entry maps are not counted
 * (shared by every tensor; a checkpoint stores them per tensor: +64 / +1088 bytes). */
int64_t qlt_nf4_bytes(int64_t numel, int blocksize, int double_quant);

/* Allocates q's host arrays for numel values (codes, absmax or absmax_q + nested_absmax) and fills
 * q->code with the NF4 codebook and q->nested_code with the dynamic map. Returns 0, or -1 with qlt_fail
 * for a bad blocksize / numel. */
int qlt_nf4_alloc_host(qlt_nf4 *q, int64_t numel, int blocksize, int double_quant);
/* The sizes of such a tensor (numel, blocks, nested blocks), no arrays: what memory planning counts. */
int qlt_nf4_shape(qlt_nf4 *q, int64_t numel, int blocksize, int double_quant);
void qlt_nf4_free_host(qlt_nf4 *q);

/* Quantizes numel float32 values into q (allocated by qlt_nf4_alloc_host for that numel). With double
 * quant the offset is qlt_nf4_absmax_mean(absmax). */
void qlt_nf4_quantize_f32(qlt_nf4 *q, const float *x);
/* Same, from values of any float dtype (F32/F16/BF16/F64; converted to float32 exactly, as bnb's kernel
 * does when it loads T and converts to float). */
void qlt_nf4_quantize(qlt_nf4 *q, const void *x, qlt_dtype dtype);

/* The pieces, exposed for tests and for the GPU path's checks. */
/* First stage only: codes and float32 absmax[nblocks] (caller's buffer). */
void qlt_nf4_quantize_codes(uint8_t *codes, float *absmax, const float *x, int64_t numel, int blocksize);
/* bnb's midpoint tree: the NF4 code of a value already scaled by 1/absmax. */
uint8_t qlt_nf4_code_of(float x_scaled);
/* bnb's dQuantize<0>: the 8-bit code of x in the 256-entry sorted map (binary search + midpoint). */
uint8_t qlt_nf4_dynamic_code_of(const float code[256], float x);
/* rcp.approx.ftz.f32 as bnb's kernels compute 1/absmax (see nf4_rcp_table.c). */
float qlt_nf4_bnb_rcp(float a);
/* Deterministic mean of n float32 values: partial sums in double of QLT_NF4_MEAN_CHUNK consecutive
 * values in order, those summed in order, divided by n, rounded to float. torch's float32 CUDA mean
 * (what bnb uses) can differ in the last bits: docs/NF4.md. */
float qlt_nf4_absmax_mean(const float *absmax, int64_t n);
/* Second stage: fills q->absmax_q, q->nested_absmax and q->offset from float32 absmax[q->nblocks] and
 * the given offset (bnb's quantize_blockwise(absmax - offset, blocksize=256) with the map in
 * q->nested_code). */
void qlt_nf4_double_quant(qlt_nf4 *q, const float *absmax, float offset);

/* The float32 scale of every block (nested ones dequantized), absmax_out[q->nblocks]. */
void qlt_nf4_absmax_f32(const qlt_nf4 *q, float *absmax_out);
/* Dequantizes all q->numel values. */
void qlt_nf4_dequantize_f32(const qlt_nf4 *q, float *out);
void qlt_nf4_dequantize_bf16(const qlt_nf4 *q, uint16_t *out);
void qlt_nf4_dequantize_f16(const qlt_nf4 *q, uint16_t *out);

/* Largest gap between neighbouring NF4 codebook values (0.2770...): |x - dq(q(x))| <= gap/2 * absmax. */
float qlt_nf4_max_gap(void);

#endif
