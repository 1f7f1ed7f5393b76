/* attention_decode.c: the reference for attention over a KV cache (generation): n new queries at positions
 * past .. past+n-1, each attending every cached key up to its own position (a sliding-window layer: only
 * the last `window` of them, as transformers' sliding_window_overlay). The arithmetic is the training
 * forward's (attention.c): scores, maximum, softmax and the weighted sum of values in double, rounded once,
 * so a decoded token's logits equal the full forward's on the same sequence up to float32 rounding of the
 * inputs. */
#include <math.h>

#include "common/error.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemma_ops.h"

#define QLT_CPU_DECODE_MAX_HEAD_DIM 512

void qlt_cpu_attention_decode(float *out, const float *q, const float *k, const float *v, int64_t past, int64_t n,
                              int n_heads, int n_kv_heads, int head_dim, float scale, int window) {
    qlt_cpu_attention_decode_softcap(out, q, k, v, past, n, n_heads, n_kv_heads, head_dim, scale, window, 0);
}

/* A scaled score through Gemma 2's soft-cap (softcap 0: as it is), as attention.c forms it. */
static inline double capped_score(double s, float softcap) { return softcap > 0 ? softcap * tanh(s / softcap) : s; }

void qlt_cpu_attention_decode_softcap(float *out, const float *q, const float *k, const float *v, int64_t past,
                                      int64_t n, int n_heads, int n_kv_heads, int head_dim, float scale, int window,
                                      float softcap) {
    const int group = n_heads / n_kv_heads;
    const int64_t qs = (int64_t)n_heads * head_dim, ks = (int64_t)n_kv_heads * head_dim;
    QLT_ASSERT(head_dim <= QLT_CPU_DECODE_MAX_HEAD_DIM && n_heads % n_kv_heads == 0);
#pragma omp parallel for collapse(2) schedule(static) if ((past + n) * n * qs > 1000000)
    for (int64_t i = 0; i < n; i++) {
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + i * qs + (int64_t)h * head_dim;
            const int64_t last = past + i;
            const int64_t first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
            const int kvh = h / group;
            double mx = -INFINITY;
            for (int64_t j = first; j <= last; j++) {
                const float *kj = k + j * ks + (int64_t)kvh * head_dim;
                double s = 0;
                for (int e = 0; e < head_dim; e++) s += (double)qh[e] * kj[e];
                s = capped_score(s * scale, softcap);
                if (s > mx) mx = s;
            }
            double denom = 0;
            for (int64_t j = first; j <= last; j++) {
                const float *kj = k + j * ks + (int64_t)kvh * head_dim;
                double s = 0;
                for (int e = 0; e < head_dim; e++) s += (double)qh[e] * kj[e];
                denom += exp(capped_score(s * scale, softcap) - mx);
            }
            const double l = mx + log(denom);
            double acc[QLT_CPU_DECODE_MAX_HEAD_DIM];
            for (int e = 0; e < head_dim; e++) acc[e] = 0;
            for (int64_t j = first; j <= last; j++) {
                const float *kj = k + j * ks + (int64_t)kvh * head_dim;
                const float *vj = v + j * ks + (int64_t)kvh * head_dim;
                double s = 0;
                for (int e = 0; e < head_dim; e++) s += (double)qh[e] * kj[e];
                const double p = exp(capped_score(s * scale, softcap) - l);
                for (int e = 0; e < head_dim; e++) acc[e] += p * vj[e];
            }
            float *oh = out + i * qs + (int64_t)h * head_dim;
            for (int e = 0; e < head_dim; e++) oh[e] = (float)acc[e];
        }
    }
}
