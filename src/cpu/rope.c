/* rope.c: rotary position embedding reference (Hugging Face rotate-half layout: element i pairs with
 * i + head_dim/2). The angle pos * inv_freq is formed in float32 as transformers does; cos/sin are then
 * evaluated in double. inverse = 1 rotates back (the backward of a rotation is its transpose). */
#include <math.h>

#include "cpu/cpu_ops.h"

void qlt_cpu_rope(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                  int inverse) {
    int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (n * heads * head_dim > 65536)
    for (int64_t t = 0; t < n; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[t] * inv_freq[i];
            double c = cos((double)angle), s = sin((double)angle);
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
