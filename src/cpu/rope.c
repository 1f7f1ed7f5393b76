/* rope.c: rotary position embedding, reference and default mode (Hugging Face rotate-half layout: element i
 * pairs with i + rotary_dim/2; rotary_dim = head_dim but for partial rotary, whose other dims pass through).
 * The angle pos * inv_freq is formed in float32 as transformers does; the reference then evaluates cos/sin in
 * double. cos and sin are times attn_factor (LongRoPE; 1 otherwise). inverse = 1 applies the transpose (the
 * backward of a rotation is its transpose; the factor stays). */
#include <math.h>

#include "common/error.h"
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"

void qlt_cpu_rope_scaled(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                         int rotary_dim, float attn_factor, int inverse) {
    int half = rotary_dim / 2;
#pragma omp parallel for schedule(static) if (n * heads * head_dim > 65536)
    for (int64_t t = 0; t < n; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[t] * inv_freq[i];
            double c = cos((double)angle), s = sin((double)angle);
            if (attn_factor != 1.0f) { /* transformers: the float32 cos / sin times the factor, in float32 */
                c = (double)((float)c * attn_factor);
                s = (double)((float)s * attn_factor);
            }
            if (inverse) s = -s;
            for (int h = 0; h < heads; h++) {
                float *xh = x + (t * heads + h) * head_dim;
                double a = xh[i], b = xh[i + half];
                xh[i] = (float)(a * c - b * s);
                xh[i + half] = (float)(b * c + a * s);
            }
        }
    }
}

void qlt_cpu_rope(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                  int inverse) {
    qlt_cpu_rope_scaled(x, pos, inv_freq, n, heads, head_dim, head_dim, 1.0f, inverse);
}

#define QLT_CPU_ROPE_MAX_HALF 512

/* The default mode's: cos / sin in float32 of the same float32 angle, the rotation in float32, tokens
 * across threads. */
QLT_CPU_VECTOR
void qlt_cpu_rope_scaled_fast(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                              int rotary_dim, float attn_factor, int inverse) {
    int half = rotary_dim / 2;
    QLT_ASSERT(half <= QLT_CPU_ROPE_MAX_HALF);
#pragma omp parallel for schedule(static) if (n * heads * head_dim > 65536)
    for (int64_t t = 0; t < n; t++) {
        float cs[QLT_CPU_ROPE_MAX_HALF], sn[QLT_CPU_ROPE_MAX_HALF]; /* this token's cos, sin [half] */
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[t] * inv_freq[i];
            cs[i] = cosf(angle) * attn_factor; /* transformers: the float32 cos / sin times the factor */
            sn[i] = (inverse ? -sinf(angle) : sinf(angle)) * attn_factor;
        }
        for (int h = 0; h < heads; h++) {
            float *a = x + (t * heads + h) * head_dim, *b = a + half;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float ai = a[i], bi = b[i];
                a[i] = ai * cs[i] - bi * sn[i];
                b[i] = bi * cs[i] + ai * sn[i];
            }
        }
    }
}

void qlt_cpu_rope_fast(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                       int inverse) {
    qlt_cpu_rope_scaled_fast(x, pos, inv_freq, n, heads, head_dim, head_dim, 1.0f, inverse);
}
