/* test_dtype.c: float conversions round exactly as torch does. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "common/dtype.h"

Test(dtype, bf16_round_to_nearest_even) {
    /* 1 + 2^-8 lies exactly between two bf16 values: ties go to the even mantissa (1.0). */
    cr_assert_eq(qlt_f32_to_bf16(1.0f + 1.0f / 256.0f), 0x3f80);
    /* 1 + 3*2^-8 ties between 1+2^-7 (odd) and 1+2^-6 (even) -> rounds up to even. */
    cr_assert_eq(qlt_f32_to_bf16(1.0f + 3.0f / 256.0f), 0x3f82);
    cr_assert_eq(qlt_bf16_to_f32(0x3f80), 1.0f);
    cr_assert_eq(qlt_bf16_to_f32(qlt_f32_to_bf16(-2.5f)), -2.5f);
    cr_assert(isnan(qlt_bf16_to_f32(qlt_f32_to_bf16(NAN))));
}

Test(dtype, f16_round_trip_and_limits) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        float f = qlt_f16_to_f32((uint16_t)h);
        cr_assert_eq(qlt_f32_to_f16(f), h, "f16 0x%04x -> %g -> 0x%04x", h, f, qlt_f32_to_f16(f));
    }
    cr_assert_eq(qlt_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(qlt_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
    cr_assert_eq(qlt_f32_to_f16(1e-8f), 0x0000);
    cr_assert_eq(qlt_f32_to_f16(5.9604645e-08f), 0x0001); /* smallest subnormal */
}

Test(dtype, names_and_sizes) {
    qlt_dtype t;
    cr_assert_eq(qlt_dtype_parse("BF16", &t), 0);
    cr_assert_eq(t, QLT_DTYPE_BF16);
    cr_assert_eq(qlt_dtype_size(t), 2);
    cr_assert_eq(qlt_dtype_parse("F8_E4M3", &t), -1);
    cr_assert_str_eq(qlt_dtype_name(QLT_DTYPE_I64), "I64");
}

/* A double is rounded once: 1 + 2^-8 + 2^-30 is just above the bf16 tie 1 + 2^-8, so it rounds up to
 * 1 + 2^-7, where double -> float -> bf16 would land on the tie and go to the even 1.0. Ties and exact
 * values still round to even, negatives mirror, and f16 (subnormals too) rounds once likewise. */
Test(dtype, f64_rounds_once) {
    double above_tie = 1.0 + ldexp(1.0, -8) + ldexp(1.0, -30);
    uint16_t h;
    qlt_convert_from_f64(&h, QLT_DTYPE_BF16, &above_tie, 1);
    cr_expect_eq(h, 0x3f81, "got 0x%04x", h);
    cr_expect_eq(qlt_f32_to_bf16((float)above_tie), 0x3f80); /* what rounding twice gives */
    double below_tie = 1.0 + ldexp(1.0, -8) - ldexp(1.0, -30), tie = 1.0 + ldexp(1.0, -8), neg = -above_tie;
    qlt_convert_from_f64(&h, QLT_DTYPE_BF16, &below_tie, 1);
    cr_expect_eq(h, 0x3f80);
    qlt_convert_from_f64(&h, QLT_DTYPE_BF16, &tie, 1);
    cr_expect_eq(h, 0x3f80);
    qlt_convert_from_f64(&h, QLT_DTYPE_BF16, &neg, 1);
    cr_expect_eq(h, 0xbf81);
    double f16_above = 1.0 + ldexp(1.0, -11) + ldexp(1.0, -40); /* f16 tie 1 + 2^-11, just above */
    qlt_convert_from_f64(&h, QLT_DTYPE_F16, &f16_above, 1);
    cr_expect_eq(h, 0x3c01, "got 0x%04x", h);
    double sub = ldexp(1.0, -25) + ldexp(1.0, -60); /* above half the smallest f16 subnormal */
    qlt_convert_from_f64(&h, QLT_DTYPE_F16, &sub, 1);
    cr_expect_eq(h, 0x0001, "got 0x%04x", h);
    double exact[3] = {0.0, -2.5, 3.140625};
    float f[3];
    qlt_convert_from_f64(f, QLT_DTYPE_F32, exact, 3);
    cr_expect(f[0] == 0.0f && f[1] == -2.5f && f[2] == 3.140625f);
}
