/* adamw.c: global-norm clipping and AdamW with torch semantics (reference).
 * torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to at most 1.
 * torch.optim.AdamW (decoupled): p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps). */
#include <math.h>

#include "cpu/cpu_ops.h"

double qlt_cpu_sumsq(const float *g, int64_t count) {
    double s = 0;
    for (int64_t i = 0; i < count; i++) s += (double)g[i] * g[i];
    return s;
}

float qlt_clip_scale(float grad_norm_sq, float max_norm) {
    if (max_norm <= 0) return 1.0f;
    float norm = sqrtf(grad_norm_sq);
    float coef = max_norm / (norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}

void qlt_cpu_adamw(float *p, const float *g, float *m, float *v, int64_t count, float lr, float beta1, float beta2,
                   float eps, float weight_decay, float bias_correction1, float bias_correction2, float clip) {
    float step_size = lr / bias_correction1;
    float bc2_sqrt = sqrtf(bias_correction2);
    for (int64_t i = 0; i < count; i++) {
        float gi = g[i] * clip;
        p[i] *= 1.0f - lr * weight_decay;
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * m[i] / denom;
    }
}
