/* weight.h: a frozen linear weight [rows = out_features, cols = in_features], row-major as Hugging Face
 * stores it, in one of several storage formats. Pointers are backend memory (host for the CPU backend,
 * device for CUDA). The backend's linear ops read whichever format is present; NF4 is dequantized on the
 * fly into backend scratch, never kept in fp32.
 *
 * NF4 layout is bitsandbytes' exactly: the weight flattened row-major into blocks of `blocksize`
 * values, one absmax per block, 4-bit codes two per byte with the even element in the high nibble;
 * with double quantization the absmax values minus their mean are stored as 8-bit codes of
 * bitsandbytes' signed dynamic map, blockwise (nested_blocksize = 256) with one float32 scale a block. */
#ifndef QLT_WEIGHT_H
#define QLT_WEIGHT_H

#include <stdint.h>

typedef enum qlt_wformat {
    QLT_WFORMAT_F32 = 0,
    QLT_WFORMAT_BF16,
    QLT_WFORMAT_F16,
    QLT_WFORMAT_NF4,
} qlt_wformat;

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

typedef struct qlt_weight {
    qlt_wformat format;
    int64_t rows; /* out_features */
    int64_t cols; /* in_features */
    void *data;   /* dense formats: [rows, cols] values */
    qlt_nf4 nf4;  /* format == QLT_WFORMAT_NF4 */
} qlt_weight;

#endif
