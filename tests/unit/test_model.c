/* test_model.c: model-level numbers that must equal transformers' exactly (the attention scale) and the
 * loader's handling of tied embeddings. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "model/model_config.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* transformers: scaling = head_dim ** -0.5 (a Python double), float32 in the kernel. Expected bits are
 * numpy.float32(hd ** -0.5); 96 and 112 are where 1.0f / sqrtf(hd) lands 1 ulp away. */
Test(model, attention_scale_is_head_dim_pow_minus_half) {
    static const struct { int hd; uint32_t bits; } want[] = {
        {64, 0x3e000000}, {96, 0x3dd105ec}, {112, 0x3dc1848f}, {128, 0x3db504f3}, {6, 0x3ed105ec},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        qlt_model_config mc = {.head_dim = want[i].hd};
        float s = qlt_model_attn_scale(&mc);
        cr_expect_eq(bits_of(s), want[i].bits, "head_dim %d: scale %a (0x%08x), want 0x%08x", want[i].hd, s,
                     bits_of(s), want[i].bits);
    }
}
