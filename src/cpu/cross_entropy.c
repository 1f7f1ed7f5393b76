/* cross_entropy.c: fused lm_head + cross-entropy: per token, logits = x . W^T, loss =
 * logsumexp(logits) - logits[target], and (training) dx = grad_scale * (softmax - onehot) . W.
 * The reference keeps logits in double: rounding them to float32 was the largest error of the whole CPU
 * gradient (8x the rest), and Adam amplifies errors of near-zero gradient elements (|g| ~ eps) into the
 * weights. The default mode's (below) computes them in float32 through OpenBLAS, a chunk of tokens at once. */
#include <math.h>
#include <string.h>

#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemma_ops.h"

double qlt_cpu_lm_head_loss(float *dx, float *scratch, const float *x, const float *w, const int32_t *targets,
                            int64_t n, int64_t d, int64_t vocab, float grad_scale) {
    return qlt_cpu_lm_head_loss_softcap(dx, scratch, x, w, targets, n, d, vocab, grad_scale, 0);
}

/* With Gemma's final_logit_softcapping the logits are softcap tanh(logit / softcap) and the gradient of each
 * logit carries 1 - tanh^2 (tanh = capped / softcap). */
double qlt_cpu_lm_head_loss_softcap(float *dx, float *scratch, const float *x, const float *w, const int32_t *targets,
                                    int64_t n, int64_t d, int64_t vocab, float grad_scale, float softcap) {
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
            if (softcap > 0) s = softcap * tanh(s / softcap);
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
                if (softcap > 0) g *= 1.0 - (logits[v] / softcap) * (logits[v] / softcap);
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

/* ---- the default mode: logits of a chunk of tokens in float32 through OpenBLAS ---- */

size_t qlt_cpu_lm_head_loss_fast_scratch(int64_t n, int64_t vocab) {
    int64_t rows = n < QLT_CPU_LOSS_CHUNK_FAST ? n : QLT_CPU_LOSS_CHUNK_FAST;
    return sizeof(double) * (size_t)n + sizeof(float) * (size_t)(rows * vocab);
}

/* One row: its loss (lse - logit[target]); when grad, the row becomes grad_scale * (softmax - onehot), times
 * 1 - tanh^2 with a soft-cap (softcap > 0: the row is capped first). */
QLT_CPU_VECTOR
static double loss_row(float *logits, int64_t vocab, int32_t target, int grad, float grad_scale, float softcap) {
    if (softcap > 0) {
        const float inv = 1.0f / softcap;
#pragma omp simd
        for (int64_t v = 0; v < vocab; v++) logits[v] = softcap * qlt_cpu_tanhf(logits[v] * inv);
    }
    const float target_logit = logits[target];
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
    double sum = 0;
    if (grad) {
#pragma omp simd reduction(+ : sum)
        for (int64_t v = 0; v < vocab; v++) {
            float e = qlt_cpu_expf(logits[v] - mx);
            sum += e;
            float th = softcap > 0 ? logits[v] / softcap : 0.0f;
            logits[v] = softcap > 0 ? e * (1.0f - th * th) : e;
        }
    } else {
#pragma omp simd reduction(+ : sum)
        for (int64_t v = 0; v < vocab; v++) sum += qlt_cpu_expf(logits[v] - mx);
    }
    const double lse = (double)mx + log(sum);
    if (grad) {
        const float k = (float)(grad_scale / sum);
#pragma omp simd
        for (int64_t v = 0; v < vocab; v++) logits[v] *= k;
        const float th = softcap > 0 ? target_logit / softcap : 0.0f;
        logits[target] -= grad_scale * (1.0f - th * th);
    }
    return lse - target_logit;
}

double qlt_cpu_lm_head_loss_fast(float *dx, void *scratch, const float *x, const float *w, const int32_t *targets,
                                 int64_t n, int64_t d, int64_t vocab, float grad_scale) {
    return qlt_cpu_lm_head_loss_softcap_fast(dx, scratch, x, w, targets, n, d, vocab, grad_scale, 0);
}

double qlt_cpu_lm_head_loss_softcap_fast(float *dx, void *scratch, const float *x, const float *w,
                                         const int32_t *targets, int64_t n, int64_t d, int64_t vocab, float grad_scale,
                                         float softcap) {
    double *token_loss = scratch;                                /* [n], summed in order below */
    float *logits = (float *)(void *)((double *)scratch + n);   /* [chunk, vocab] */
    for (int64_t t0 = 0; t0 < n; t0 += QLT_CPU_LOSS_CHUNK_FAST) {
        const int64_t m = n - t0 < QLT_CPU_LOSS_CHUNK_FAST ? n - t0 : QLT_CPU_LOSS_CHUNK_FAST;
        qlt_cpu_sgemm(0, 1, m, vocab, d, 1.0f, x + t0 * d, d, w, d, 0.0f, logits, vocab);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < m; i++) {
            float *row = logits + i * vocab;
            const int32_t target = targets[t0 + i];
            if (target < 0) { /* no loss, a zero gradient row */
                token_loss[t0 + i] = 0;
                if (dx) memset(row, 0, sizeof(float) * (size_t)vocab);
                continue;
            }
            token_loss[t0 + i] = loss_row(row, vocab, target, dx != NULL, grad_scale, softcap);
        }
        if (dx) qlt_cpu_sgemm(0, 0, m, d, vocab, 1.0f, logits, vocab, w, d, 0.0f, dx + t0 * d, d);
    }
    double total = 0; /* a fixed summation order keeps runs (and resumes) bit-identical */
    for (int64_t t = 0; t < n; t++) total += token_loss[t];
    return total;
}
