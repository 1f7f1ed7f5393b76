/* swiglu.c: the SwiGLU gate h = silu(gate) * up and its backward (reference). */
#include <math.h>

#include "cpu/cpu_ops.h"

void qlt_cpu_swiglu_fwd(float *h, const float *gate, const float *up, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        double g = gate[i], sig = 1.0 / (1.0 + exp(-g));
        h[i] = (float)(g * sig * up[i]);
    }
}

/* d silu(g)/dg = sig (1 + g (1 - sig)) */
void qlt_cpu_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        double g = gate[i], sig = 1.0 / (1.0 + exp(-g));
        double silu = g * sig;
        dup[i] = (float)(dh[i] * silu);
        dgate[i] = (float)(dh[i] * up[i] * sig * (1.0 + g * (1.0 - sig)));
    }
}
