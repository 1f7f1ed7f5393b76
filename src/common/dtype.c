/* dtype.c: element sizes, names and float conversions (see dtype.h). */
#include "common/dtype.h"

#include <math.h>
#include <string.h>

#include "common/error.h"

static const struct {
    const char *name;
    size_t size;
} dtype_table[QLT_DTYPE_COUNT] = {
    [QLT_DTYPE_F32] = {"F32", 4},  [QLT_DTYPE_F16] = {"F16", 2}, [QLT_DTYPE_BF16] = {"BF16", 2},
    [QLT_DTYPE_F64] = {"F64", 8},  [QLT_DTYPE_I64] = {"I64", 8}, [QLT_DTYPE_I32] = {"I32", 4},
    [QLT_DTYPE_I16] = {"I16", 2},  [QLT_DTYPE_I8] = {"I8", 1},   [QLT_DTYPE_U8] = {"U8", 1},
    [QLT_DTYPE_BOOL] = {"BOOL", 1},
};

size_t qlt_dtype_size(qlt_dtype t) {
    QLT_ASSERT(t >= 0 && t < QLT_DTYPE_COUNT);
    return dtype_table[t].size;
}

const char *qlt_dtype_name(qlt_dtype t) {
    QLT_ASSERT(t >= 0 && t < QLT_DTYPE_COUNT);
    return dtype_table[t].name;
}

int qlt_dtype_parse(const char *name, qlt_dtype *out) {
    for (int i = 0; i < QLT_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_table[i].name) == 0) {
            *out = (qlt_dtype)i;
            return 0;
        }
    }
    return -1;
}

int qlt_dtype_is_float(qlt_dtype t) {
    return t == QLT_DTYPE_F32 || t == QLT_DTYPE_F16 || t == QLT_DTYPE_BF16 || t == QLT_DTYPE_F64;
}

float qlt_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t qlt_f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

float qlt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: value = mant * 2^-24 */
            float v = ldexpf((float)mant, -24);
            memcpy(&bits, &v, 4);
            bits |= sign;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t qlt_f32_to_f16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t absbits = bits & 0x7fffffffu;
    if (absbits > 0x7f800000u) return sign | 0x7e00u;       /* NaN */
    if (absbits >= 0x477ff000u) return sign | 0x7c00u;      /* rounds to inf (>= 65520) */
    if (absbits < 0x38800000u) {                              /* below the smallest normal: subnormal */
        float a;
        memcpy(&a, &absbits, 4);
        float scaled = a * 16777216.0f; /* 2^24: units of the smallest subnormal */
        return sign | (uint16_t)lrintf(scaled); /* default rounding mode: nearest even */
    }
    uint32_t mant_rounding = 0xfffu + ((absbits >> 13) & 1u);
    absbits += mant_rounding;
    return sign | (uint16_t)(((absbits >> 23) - 112u) << 10 | ((absbits >> 13) & 0x3ffu));
}

void qlt_convert_to_f32(float *dst, const void *src, qlt_dtype src_type, size_t n) {
    const unsigned char *s = src;
    switch (src_type) {
    case QLT_DTYPE_F32: memcpy(dst, src, n * 4); break;
    case QLT_DTYPE_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, s + 8 * i, 8);
            dst[i] = (float)d;
        }
        break;
    case QLT_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = qlt_bf16_to_f32(h);
        }
        break;
    case QLT_DTYPE_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = qlt_f16_to_f32(h);
        }
        break;
    default: QLT_ASSERT(!"qlt_convert_to_f32: not a float dtype");
    }
}

void qlt_convert_from_f32(void *dst, qlt_dtype dst_type, const float *src, size_t n) {
    unsigned char *d = dst;
    switch (dst_type) {
    case QLT_DTYPE_F32: memcpy(dst, src, n * 4); break;
    case QLT_DTYPE_F64:
        for (size_t i = 0; i < n; i++) {
            double v = src[i];
            memcpy(d + 8 * i, &v, 8);
        }
        break;
    case QLT_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = qlt_f32_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case QLT_DTYPE_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = qlt_f32_to_f16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    default: QLT_ASSERT(!"qlt_convert_from_f32: not a float dtype");
    }
}

/* d rounded to a float32 whose last bit records inexactness (round to odd): truncate toward zero, then set
 * bit 0 when anything was cut off. A later rounding to a format of at most 22 bits then rounds as d would. */
static float f64_to_f32_odd(double d) {
    float f = (float)d;
    if (isnan(d) || isinf(f) || (double)f == d) return f;
    if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
    uint32_t bits;
    memcpy(&bits, &f, 4);
    bits |= 1u;
    memcpy(&f, &bits, 4);
    return f;
}

void qlt_convert_from_f64(void *dst, qlt_dtype dst_type, const double *src, size_t n) {
    unsigned char *d = dst;
    switch (dst_type) {
    case QLT_DTYPE_F64: memcpy(dst, src, n * 8); break;
    case QLT_DTYPE_F32:
        for (size_t i = 0; i < n; i++) {
            float v = (float)src[i];
            memcpy(d + 4 * i, &v, 4);
        }
        break;
    case QLT_DTYPE_BF16:
    case QLT_DTYPE_F16:
        for (size_t i = 0; i < n; i++) {
            float odd = f64_to_f32_odd(src[i]);
            uint16_t h = dst_type == QLT_DTYPE_BF16 ? qlt_f32_to_bf16(odd) : qlt_f32_to_f16(odd);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    default: QLT_ASSERT(!"qlt_convert_from_f64: not a float dtype");
    }
}
