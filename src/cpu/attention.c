/* attention.c: causal grouped-query attention reference with packed-example masking, forward and
 * backward. Query t of a row attends to keys j with seg_start[t] <= j <= t. Query head h reads kv head
 * h / (n_heads / n_kv_heads). Scores are accumulated in double; the log-sum-exp of each (token, head)
 * row is saved so the backward recomputes probabilities instead of storing them; the backward also
 * accumulates every sum in double and rounds each output once. */
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
 * dQ_t = scale sum_j dS_tj K_j; dK_j = scale sum_t dS_tj Q_t; dV_j = sum_t P_tj dO_t.
 * q, dq, dout, out [N, n_heads * head_dim]; k, v, dk, dv [N, n_kv_heads * head_dim]; lse [N, n_heads].
 * Every sum (D, dP, dQ, and dK / dV over the group's query heads and tokens) is accumulated in double and
 * rounded to float once; scratch gets D as float [N, n_heads] (what the GPU check compares), the
 * arithmetic uses the double D. */
void qlt_cpu_attention_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                           int head_dim, float scale) {
    int group = n_heads / n_kv_heads;
    int64_t qs = (int64_t)n_heads * head_dim, ks = (int64_t)n_kv_heads * head_dim;
    int64_t n = (int64_t)batch * seq;
    QLT_ASSERT(head_dim <= QLT_CPU_MAX_HEAD_DIM);
    double *dd_all = qlt_xmalloc(sizeof(double) * (size_t)(n * n_heads)); /* D [N, n_heads] */
    for (int64_t r = 0; r < n; r++)
        for (int h = 0; h < n_heads; h++) {
            const float *o = out + r * qs + (int64_t)h * head_dim, *d = dout + r * qs + (int64_t)h * head_dim;
            double s = 0;
            for (int e = 0; e < head_dim; e++) s += (double)o[e] * d[e];
            dd_all[r * n_heads + h] = s;
            scratch[r * n_heads + h] = (float)s;
        }
    /* Parallel over (batch, kv head): each task owns its dk/dv slice and the dq of its query heads. */
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)batch * seq * seq * qs > 1000000)
    for (int b = 0; b < batch; b++) {
        for (int kvh = 0; kvh < n_kv_heads; kvh++) {
            /* dK, dV of this (batch, kv head): [seq, head_dim] each, double */
            double *dk_acc = qlt_xcalloc((size_t)seq * (size_t)head_dim * 2, sizeof(double));
            double *dv_acc = dk_acc + (int64_t)seq * head_dim;
            for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                for (int t = 0; t < seq; t++) {
                    int64_t row = (int64_t)b * seq + t;
                    const float *qh = q + row * qs + (int64_t)h * head_dim;
                    const float *doh = dout + row * qs + (int64_t)h * head_dim;
                    double dq_acc[QLT_CPU_MAX_HEAD_DIM];
                    for (int e = 0; e < head_dim; e++) dq_acc[e] = 0;
                    double l = lse[row * n_heads + h], dd = dd_all[row * n_heads + h];
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
                        double *dkj = dk_acc + (int64_t)j * head_dim, *dvj = dv_acc + (int64_t)j * head_dim;
                        for (int e = 0; e < head_dim; e++) {
                            dq_acc[e] += ds * kj[e];
                            dkj[e] += ds * qh[e];
                            dvj[e] += p * doh[e];
                        }
                    }
                    float *dqh = dq + row * qs + (int64_t)h * head_dim;
                    for (int e = 0; e < head_dim; e++) dqh[e] = (float)dq_acc[e];
                }
            }
            for (int j = 0; j < seq; j++) {
                int64_t kr = (int64_t)b * seq + j;
                float *dkj = dk + kr * ks + (int64_t)kvh * head_dim, *dvj = dv + kr * ks + (int64_t)kvh * head_dim;
                for (int e = 0; e < head_dim; e++) {
                    dkj[e] = (float)dk_acc[(int64_t)j * head_dim + e];
                    dvj[e] = (float)dv_acc[(int64_t)j * head_dim + e];
                }
            }
            free(dk_acc);
        }
    }
    free(dd_all);
}
