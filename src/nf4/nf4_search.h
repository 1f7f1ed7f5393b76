/* nf4_search.h: bitsandbytes' two code searches, written once for the CPU reference (src/nf4/nf4.c) and
 * the CUDA kernels (src/cuda/nf4.cu), so both pick the same code for every input, ties and NaN included:
 *  - the NF4 tree (dQuantizeNF4): thresholds are the midpoints of neighbouring codebook values; a value
 *    exactly on a midpoint goes to the lower code (strict >); NaN goes to code 0;
 *  - the signed 8-bit dynamic map search (dQuantize<0>): a 7-step binary search from pivot 127 that
 *    remembers the last value above and below, then picks by the midpoint (a value on the midpoint keeps
 *    the pivot). On the device the midpoint arithmetic uses round-to-nearest intrinsics so fast-math
 *    contraction cannot change it. */
#ifndef QLT_NF4_SEARCH_H
#define QLT_NF4_SEARCH_H

#include <stdint.h>

#include "common/hostdev.h"

#if defined(__CUDA_ARCH__)
#define QLT_NF4_MIDPOINT(a, b) __fmul_rn(__fadd_rn((a), (b)), 0.5f)
#else
#define QLT_NF4_MIDPOINT(a, b) (((a) + (b)) * 0.5f)
#endif

QLT_HD uint8_t qlt_nf4_tree_code(float x) {
    if (x > 0.03979014977812767f)
        if (x > 0.3893125355243683f)
            if (x > 0.6427869200706482f)
                return x > 0.8614784181118011f ? 15 : 14;
            else
                return x > 0.5016634166240692f ? 13 : 12;
        else if (x > 0.2035212516784668f)
            return x > 0.2920137718319893f ? 11 : 10;
        else
            return x > 0.1202552504837513f ? 9 : 8;
    else if (x > -0.33967943489551544f)
        if (x > -0.13791173323988914f)
            return x > -0.045525018125772476f ? 7 : 6;
        else
            return x > -0.23460740596055984f ? 5 : 4;
    else if (x > -0.6106329262256622f)
        return x > -0.4599952697753906f ? 3 : 2;
    else
        return x > -0.8480964004993439f ? 1 : 0;
}

QLT_HD uint8_t qlt_nf4_dynamic_search(const float *code, float x) {
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f;
    float val = code[pivot];
    for (int i = 64; i > 0; i >>= 1) {
        if (x > val) {
            lower_pivot = pivot;
            lower = val;
            pivot += i;
        } else {
            upper_pivot = pivot;
            upper = val;
            pivot -= i;
        }
        val = code[pivot];
    }
    if (upper_pivot == 255) upper = code[upper_pivot];
    if (lower_pivot == 0) lower = code[lower_pivot];
    if (x > val) return (uint8_t)(x > QLT_NF4_MIDPOINT(upper, val) ? upper_pivot : pivot);
    return (uint8_t)(x < QLT_NF4_MIDPOINT(lower, val) ? lower_pivot : pivot);
}

#endif
