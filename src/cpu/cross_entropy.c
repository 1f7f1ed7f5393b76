/* cross_entropy.c: fused lm_head + cross-entropy reference: per token, logits = x . W^T, loss =
 * logsumexp(logits) - logits[target], and (training) dx = grad_scale * (softmax - onehot) . W.
 * Logits stay in double: rounding them to float32 was the largest error of the whole CPU gradient
 * (8x the rest), and Adam amplifies errors of near-zero gradient elements (|g| ~ eps) into the weights. */
#include <math.h>
#include <string.h>

#include "cpu/cpu_ops.h"

double qlt_cpu_lm_head_loss(float *dx, float *scratch, const float *x, const float *w, const int32_t *targets,
                            int64_t n, int64_t d, int64_t vocab, float grad_scale) {
    double *token_loss = (double *)(void *)scratch + n * vocab; /* [n], summed in order below */
#pragma omp parallel for schedule(dynamic, 1) if (n * d * vocab > 1000000)
    for (int64_t t = 0; t < n; t++) {
        float *dxr = dx ? dx + t * d : NULL;
        int32_t target = targets[t];
        token_loss[t] = 0;
        if (target < 0) {
            if (dxr) memset(dxr, 0, sizeof(float) * (size_t)d);
            continue;
        }
        double *logits = (double *)(void *)scratch + t * vocab;
        const float *xr = x + t * d;
        double mx = -INFINITY;
        for (int64_t v = 0; v < vocab; v++) {
            const float *wr = w + v * d;
            double s = 0;
            for (int64_t j = 0; j < d; j++) s += (double)xr[j] * wr[j];
            logits[v] = s;
            if (s > mx) mx = s;
        }
        double sum = 0;
        for (int64_t v = 0; v < vocab; v++) sum += exp((double)logits[v] - mx);
        double lse = mx + log(sum);
        token_loss[t] = lse - logits[target];
        if (!dxr) continue;
        double acc[1024];
        for (int64_t j0 = 0; j0 < d; j0 += 1024) {
            int64_t jn = d - j0 < 1024 ? d - j0 : 1024;
            memset(acc, 0, sizeof(double) * (size_t)jn);
            for (int64_t v = 0; v < vocab; v++) {
                double g = exp((double)logits[v] - lse) - (v == target ? 1.0 : 0.0);
                const float *wr = w + v * d + j0;
                for (int64_t j = 0; j < jn; j++) acc[j] += g * wr[j];
            }
            for (int64_t j = 0; j < jn; j++) dxr[j0 + j] = (float)(grad_scale * acc[j]);
        }
    }
    double total = 0; /* a fixed summation order keeps runs (and resumes) bit-identical */
    for (int64_t t = 0; t < n; t++) total += token_loss[t];
    return total;
}
