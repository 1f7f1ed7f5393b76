/* dtype.h: element types as safetensors names them, and the scalar conversions between them.
 * bf16 / f16 are stored as uint16_t bit patterns on the host; conversions round to nearest even,
 * exactly as torch does (so a bf16 file written here reads back bit-identical in PyTorch). */
#ifndef QLT_DTYPE_H
#define QLT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum qlt_dtype {
    QLT_DTYPE_F32 = 0,
    QLT_DTYPE_F16,
    QLT_DTYPE_BF16,
    QLT_DTYPE_F64,
    QLT_DTYPE_I64,
    QLT_DTYPE_I32,
    QLT_DTYPE_I16,
    QLT_DTYPE_I8,
    QLT_DTYPE_U8,
    QLT_DTYPE_BOOL,
    QLT_DTYPE_COUNT
} qlt_dtype;

/* Bytes per element. */
size_t qlt_dtype_size(qlt_dtype t);
/* The safetensors spelling ("F32", "BF16", ...). */
const char *qlt_dtype_name(qlt_dtype t);
/* Parses a safetensors dtype string; returns 0 and sets *out, or -1 if unknown. */
int qlt_dtype_parse(const char *name, qlt_dtype *out);
/* True for F32 / F16 / BF16 / F64. */
int qlt_dtype_is_float(qlt_dtype t);

float qlt_bf16_to_f32(uint16_t h);
uint16_t qlt_f32_to_bf16(float f);
float qlt_f16_to_f32(uint16_t h);
uint16_t qlt_f32_to_f16(float f);

/* Converts n elements of a float dtype (F32/F16/BF16/F64) to float32. src may be unaligned. */
void qlt_convert_to_f32(float *dst, const void *src, qlt_dtype src_type, size_t n);
/* Converts n float32 values to a float dtype (F32/F16/BF16/F64). */
void qlt_convert_from_f32(void *dst, qlt_dtype dst_type, const float *src, size_t n);
/* Converts n doubles to a float dtype rounding once to nearest even, as if straight from the double:
 * F32 by the FPU; BF16 / F16 through a float32 rounded to odd (an inexact result keeps its last bit set),
 * which float32's 24 bits make safe to round again (double rounding would move ties, e.g. 1 + 2^-8 +
 * 2^-30 to 1 instead of 1 + 2^-7). */
void qlt_convert_from_f64(void *dst, qlt_dtype dst_type, const double *src, size_t n);

#endif
