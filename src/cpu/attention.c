/* attention.c: causal grouped-query attention reference with packed-example masking, forward and
 * backward. Query t of a row attends to keys j with seg_start[t] <= j <= t. Query head h reads kv head
 * h / (n_heads / n_kv_heads). Scores are accumulated in double; the log-sum-exp of each (token, head)
 * row is saved so the backward recomputes probabilities instead of storing them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "cpu/cpu_ops.h"

#define QLT_CPU_MAX_HEAD_DIM 512

void qlt_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                           int head_dim, float scale) {
    int group = n_heads / n_kv_heads;
    int64_t qs = (int64_t)n_heads * head_dim, ks = (int64_t)n_kv_heads * head_dim;
    QLT_ASSERT(head_dim <= QLT_CPU_MAX_HEAD_DIM);
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)batch * seq * seq * qs > 1000000)
    for (int b = 0; b < batch; b++) {
        for (int t = 0; t < seq; t++) {
            int64_t row = (int64_t)b * seq + t;
            int j0 = seg_start[row];
            for (int h = 0; h < n_heads; h++) {
                const float *qh = q + row * qs + (int64_t)h * head_dim;
                int kvh = h / group;
                double mx = -INFINITY;
                for (int j = j0; j <= t; j++) {
                    const float *kj = k + ((int64_t)b * seq + j) * ks + (int64_t)kvh * head_dim;
                    double s = 0;
                    for (int e = 0; e < head_dim; e++) s += (double)qh[e] * kj[e];
                    s *= scale;
                    if (s > mx) mx = s;
                }
                double denom = 0;
                for (int j = j0; j <= t; j++) {
                    const float *kj = k + ((int64_t)b * seq + j) * ks + (int64_t)kvh * head_dim;
                    double s = 0;
                    for (int e = 0; e < head_dim; e++) s += (double)qh[e] * kj[e];
                    denom += exp(s * scale - mx);
                }
                double l = mx + log(denom);
                lse[row * n_heads + h] = (float)l;
                float *oh = out + row * qs + (int64_t)h * head_dim;
                for (int e = 0; e < head_dim; e++) oh[e] = 0;
                double acc[QLT_CPU_MAX_HEAD_DIM];
                for (int e = 0; e < head_dim; e++) acc[e] = 0;
                for (int j = j0; j <= t; j++) {
                    const float *kj = k + ((int64_t)b * seq + j) * ks + (int64_t)kvh * head_dim;
                    const float *vj = v + ((int64_t)b * seq + j) * ks + (int64_t)kvh * head_dim;
                    double s = 0;
                    for (int e = 0; e < head_dim; e++) s += (double)qh[e] * kj[e];
                    double p = exp(s * scale - l);
                    for (int e = 0; e < head_dim; e++) acc[e] += p * vj[e];
                }
                for (int e = 0; e < head_dim; e++) oh[e] = (float)acc[e];
            }
        }
    }
}

/* dP_tj = dO_t . V_j; dS_tj = P_tj (dP_tj - D_t) with D_t = dO_t . O_t;
 * dQ_t = scale sum_j dS_tj K_j; dK_j += scale dS_tj Q_t; dV_j += P_tj dO_t. */
void qlt_cpu_attention_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                           int head_dim, float scale) {
    int group = n_heads / n_kv_heads;
    int64_t qs = (int64_t)n_heads * head_dim, ks = (int64_t)n_kv_heads * head_dim;
    int64_t n = (int64_t)batch * seq;
    for (int64_t r = 0; r < n; r++)
        for (int h = 0; h < n_heads; h++) {
            const float *o = out + r * qs + (int64_t)h * head_dim, *d = dout + r * qs + (int64_t)h * head_dim;
            double s = 0;
            for (int e = 0; e < head_dim; e++) s += (double)o[e] * d[e];
            scratch[r * n_heads + h] = (float)s;
        }
    memset(dq, 0, sizeof(float) * (size_t)(n * qs));
    memset(dk, 0, sizeof(float) * (size_t)(n * ks));
    memset(dv, 0, sizeof(float) * (size_t)(n * ks));
    /* Parallel over (batch, kv head): each task owns its dk/dv slice and the dq of its query heads. */
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)batch * seq * seq * qs > 1000000)
    for (int b = 0; b < batch; b++) {
        for (int kvh = 0; kvh < n_kv_heads; kvh++) {
            for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                for (int t = 0; t < seq; t++) {
                    int64_t row = (int64_t)b * seq + t;
                    const float *qh = q + row * qs + (int64_t)h * head_dim;
                    const float *doh = dout + row * qs + (int64_t)h * head_dim;
                    float *dqh = dq + row * qs + (int64_t)h * head_dim;
                    double l = lse[row * n_heads + h], dd = scratch[row * n_heads + h];
                    for (int j = seg_start[row]; j <= t; j++) {
                        int64_t kr = (int64_t)b * seq + j;
                        const float *kj = k + kr * ks + (int64_t)kvh * head_dim;
                        const float *vj = v + kr * ks + (int64_t)kvh * head_dim;
                        double s = 0, dp = 0;
                        for (int e = 0; e < head_dim; e++) {
                            s += (double)qh[e] * kj[e];
                            dp += (double)doh[e] * vj[e];
                        }
                        double p = exp(s * scale - l);
                        double ds = p * (dp - dd) * scale;
                        float *dkj = dk + kr * ks + (int64_t)kvh * head_dim;
                        float *dvj = dv + kr * ks + (int64_t)kvh * head_dim;
                        for (int e = 0; e < head_dim; e++) {
                            dqh[e] += (float)(ds * kj[e]);
                            dkj[e] += (float)(ds * qh[e]);
                            dvj[e] += (float)(p * doh[e]);
                        }
                    }
                }
            }
        }
    }
}
