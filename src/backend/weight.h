/* weight.h: a frozen linear weight [rows = out_features, cols = in_features], row-major as Hugging Face
 * stores it, in one of several storage formats. Pointers are backend memory (host for the CPU backend,
 * device for CUDA). The backend's linear ops read whichever format is present; NF4 is dequantized on the
 * fly into backend scratch, never kept in fp32. NF4's layout (bitsandbytes') is the codec's: nf4/nf4.h. */
#ifndef QLT_WEIGHT_H
#define QLT_WEIGHT_H

#include <stdint.h>

#include "nf4/nf4.h"

typedef enum qlt_wformat {
    QLT_WFORMAT_F32 = 0,
    QLT_WFORMAT_BF16,
    QLT_WFORMAT_F16,
    QLT_WFORMAT_NF4,
} qlt_wformat;

typedef struct qlt_weight {
    qlt_wformat format;
    int64_t rows; /* out_features */
    int64_t cols; /* in_features */
    void *data;   /* dense formats: [rows, cols] values */
    qlt_nf4 nf4;  /* format == QLT_WFORMAT_NF4 */
} qlt_weight;

#endif
