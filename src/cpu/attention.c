/* attention.c: causal grouped-query attention with packed-example masking, forward and backward. Query t
 * of a row attends to keys j with seg_start[t] <= j <= t; query head h reads kv head h / (n_heads /
 * n_kv_heads). The log-sum-exp of each (token, head) row is saved so the backward recomputes probabilities
 * instead of storing them. The reference accumulates scores and every backward sum in double and rounds each
 * output once; the default mode's (below) runs blocks of queries through OpenBLAS in float32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"
#include "cpu/gemma_ops.h"

#define QLT_CPU_MAX_HEAD_DIM 512

/* A scaled score through Gemma 2's soft-cap (softcap 0: as it is, the same bits). */
static inline double capped_score(double s, float softcap) { return softcap > 0 ? softcap * tanh(s / softcap) : s; }

void qlt_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                           int head_dim, float scale) {
    qlt_cpu_attention_softcap_fwd(out, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale, 0);
}

void qlt_cpu_attention_softcap_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                                   const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                   int head_dim, float scale, float softcap) {
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
                    s = capped_score(s * scale, softcap);
                    if (s > mx) mx = s;
                }
                double denom = 0;
                for (int j = j0; j <= t; j++) {
                    const float *kj = k + ((int64_t)b * seq + j) * ks + (int64_t)kvh * head_dim;
                    double s = 0;
                    for (int e = 0; e < head_dim; e++) s += (double)qh[e] * kj[e];
                    denom += exp(capped_score(s * scale, softcap) - mx);
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
                    double p = exp(capped_score(s * scale, softcap) - l);
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
    qlt_cpu_attention_softcap_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, seg_start, batch, seq, n_heads,
                                  n_kv_heads, head_dim, scale, 0);
}

/* With a soft-cap, dS_tj also carries the cap's derivative 1 - tanh^2. */
void qlt_cpu_attention_softcap_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                                   const float *out, const float *lse, const float *q, const float *k, const float *v,
                                   const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                   int head_dim, float scale, float softcap) {
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
                        double sc = capped_score(s * scale, softcap), p = exp(sc - l);
                        double ds = p * (dp - dd) * scale;
                        if (softcap > 0) ds *= 1.0 - (sc / softcap) * (sc / softcap);
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

/* ---- the default mode: blocks of ATT_BLOCK queries, products through OpenBLAS ----
 * A block of queries t0..t1-1 of one row sees keys j0..t1-1 with j0 = seg_start[t0] (seg_start never decreases
 * along a row); each query's own range is masked inside that. The query heads that share a kv head are
 * gathered one under the other (G heads: [G*m, head_dim]), so the block's scores S [G*m, t1-j0] are one
 * product, the probabilities overwrite them, and O = P V is another; the backward recomputes P from lse. */

#define ATT_BLOCK 64

/* Scores of one head's block -> probabilities, in place: row i (query t0+i) keeps keys lo..t0+i, the rest 0.
 * Each row's log-sum-exp is read from lse_in [m] (stride lse_stride) when given (backward), else computed
 * and written to lse_out (forward). */
QLT_CPU_VECTOR
static void block_probs(float *s, int64_t m, int64_t nk, int64_t j0, int64_t t0, const int32_t *seg_row,
                        const float *lse_in, float *lse_out, int64_t lse_stride) {
    for (int64_t i = 0; i < m; i++) {
        float *si = s + i * nk;
        int64_t lo = seg_row[t0 + i] - j0, hi = t0 + i - j0; /* inclusive */
        for (int64_t j = 0; j < lo; j++) si[j] = 0.0f;
        for (int64_t j = hi + 1; j < nk; j++) si[j] = 0.0f;
        float l;
        if (lse_in) {
            l = lse_in[i * lse_stride];
        } else {
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int64_t j = lo; j <= hi; j++) mx = si[j] > mx ? si[j] : mx;
            double sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = lo; j <= hi; j++) sum += qlt_cpu_expf(si[j] - mx);
            l = mx + (float)log(sum);
            lse_out[i * lse_stride] = l;
        }
#pragma omp simd
        for (int64_t j = lo; j <= hi; j++) si[j] = qlt_cpu_expf(si[j] - l);
    }
}

/* Gemma 2's soft-cap over a block of scaled scores s [count], in place; th (when not NULL) keeps tanh(s / cap)
 * for the backward. */
QLT_CPU_VECTOR
static void block_softcap(float *s, float *th, int64_t count, float softcap) {
    const float inv = 1.0f / softcap;
#pragma omp simd
    for (int64_t i = 0; i < count; i++) {
        float t = qlt_cpu_tanhf(s[i] * inv);
        s[i] = softcap * t;
        if (th) th[i] = t;
    }
}

/* dS *= 1 - tanh^2 over a block: the soft-cap's derivative. */
QLT_CPU_VECTOR
static void block_softcap_grad(float *ds, const float *th, int64_t count) {
#pragma omp simd
    for (int64_t i = 0; i < count; i++) ds[i] *= 1.0f - th[i] * th[i];
}

/* dS = P (dP - D) scale in place of dP [m, nk]; d [m] (stride d_stride) the rows' D. */
QLT_CPU_VECTOR
static void block_dscores(float *ds, const float *p, int64_t m, int64_t nk, const float *d, int64_t d_stride,
                          float scale) {
    for (int64_t i = 0; i < m; i++) {
        const float dd = d[i * d_stride], *pi = p + i * nk;
        float *dsi = ds + i * nk;
#pragma omp simd
        for (int64_t j = 0; j < nk; j++) dsi[j] = pi[j] * (dsi[j] - dd) * scale;
    }
}

/* dst [G*m, hd] = the G heads h0.. of rows 0..m-1 of src (row stride ld), head after head; or back (scatter). */
static void gather_heads(float *dst, const float *src, int64_t ld, int64_t m, int g, int hd) {
    for (int h = 0; h < g; h++)
        for (int64_t i = 0; i < m; i++)
            memcpy(dst + ((int64_t)h * m + i) * hd, src + i * ld + (int64_t)h * hd, sizeof(float) * (size_t)hd);
}
static void scatter_heads(float *dst, int64_t ld, const float *src, int64_t m, int g, int hd) {
    for (int h = 0; h < g; h++)
        for (int64_t i = 0; i < m; i++)
            memcpy(dst + i * ld + (int64_t)h * hd, src + ((int64_t)h * m + i) * hd, sizeof(float) * (size_t)hd);
}

void qlt_cpu_attention_fwd_fast(float *out, float *lse, const float *q, const float *k, const float *v,
                                const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                int head_dim, float scale) {
    qlt_cpu_attention_softcap_fwd_fast(out, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale,
                                       0);
}

void qlt_cpu_attention_softcap_fwd_fast(float *out, float *lse, const float *q, const float *k, const float *v,
                                        const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                        int head_dim, float scale, float softcap) {
    const int group = n_heads / n_kv_heads, nblocks = (seq + ATT_BLOCK - 1) / ATT_BLOCK;
    const int64_t qs = (int64_t)n_heads * head_dim, ks = (int64_t)n_kv_heads * head_dim;
    const int64_t tasks = (int64_t)batch * n_kv_heads * nblocks, rows = (int64_t)group * ATT_BLOCK;
#pragma omp parallel
    {
        float *s = qlt_xmalloc(sizeof(float) * (size_t)(rows * seq + 2 * rows * head_dim)); /* S [G*m, nk] */
        float *qg = s + rows * seq, *og = qg + rows * head_dim;                            /* [G*m, hd] each */
        /* later blocks see more keys: hand them out first */
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            const int blk = nblocks - 1 - (int)(task % nblocks), kvh = (int)(task / nblocks % n_kv_heads);
            const int b = (int)(task / nblocks / n_kv_heads);
            const int64_t t0 = (int64_t)blk * ATT_BLOCK, t1 = t0 + ATT_BLOCK < seq ? t0 + ATT_BLOCK : seq;
            const int64_t row0 = (int64_t)b * seq, m = t1 - t0, j0 = seg_start[row0 + t0], nk = t1 - j0;
            const int64_t qoff = (row0 + t0) * qs + (int64_t)kvh * group * head_dim;
            const int64_t koff = (row0 + j0) * ks + (int64_t)kvh * head_dim;
            gather_heads(qg, q + qoff, qs, m, group, head_dim);
            qlt_cpu_sgemm(0, 1, group * m, nk, head_dim, scale, qg, head_dim, k + koff, ks, 0.0f, s, nk);
            if (softcap > 0) block_softcap(s, NULL, group * m * nk, softcap);
            for (int g = 0; g < group; g++)
                block_probs(s + g * m * nk, m, nk, j0, t0, seg_start + row0, NULL,
                            lse + (row0 + t0) * n_heads + kvh * group + g, n_heads);
            qlt_cpu_sgemm(0, 0, group * m, head_dim, nk, 1.0f, s, nk, v + koff, ks, 0.0f, og, head_dim);
            scatter_heads(out + qoff, qs, og, m, group, head_dim);
        }
        free(s);
    }
}

/* Per block, the group's heads at once: P from lse; dV += P^T dO; dP = dO V^T; dS = P (dP - D) scale;
 * dQ = dS K; dK += dS^T Q. Parallel over (batch, kv head): each task owns its dK / dV columns and the dQ of
 * its query heads. */
void qlt_cpu_attention_bwd_fast(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *out,
                                const float *lse, const float *q, const float *k, const float *v,
                                const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                int head_dim, float scale) {
    qlt_cpu_attention_softcap_bwd_fast(dq, dk, dv, scratch, dout, out, lse, q, k, v, seg_start, batch, seq, n_heads,
                                       n_kv_heads, head_dim, scale, 0);
}

/* With a soft-cap, tanh of the block's scores is kept beside P for dS's factor 1 - tanh^2. */
void qlt_cpu_attention_softcap_bwd_fast(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                                        const float *out, const float *lse, const float *q, const float *k,
                                        const float *v, const int32_t *seg_start, int batch, int seq, int n_heads,
                                        int n_kv_heads, int head_dim, float scale, float softcap) {
    const int group = n_heads / n_kv_heads, nblocks = (seq + ATT_BLOCK - 1) / ATT_BLOCK;
    const int64_t qs = (int64_t)n_heads * head_dim, ks = (int64_t)n_kv_heads * head_dim;
    const int64_t n = (int64_t)batch * seq, rows = (int64_t)group * ATT_BLOCK;
    /* D [N, n_heads] = rowsum(dO * O), into the scratch as the op's contract says */
#pragma omp parallel for schedule(static) if (n * qs > 65536)
    for (int64_t r = 0; r < n; r++)
        for (int h = 0; h < n_heads; h++) {
            const float *o = out + r * qs + (int64_t)h * head_dim, *d = dout + r * qs + (int64_t)h * head_dim;
            double s = 0;
#pragma omp simd reduction(+ : s)
            for (int e = 0; e < head_dim; e++) s += (double)(o[e] * d[e]);
            scratch[r * n_heads + h] = (float)s;
        }
#pragma omp parallel
    {
        /* P and dP / dS [G*m, nk]; Q, dO and dQ of the group's heads [G*m, hd] */
        const int64_t th_floats = softcap > 0 ? rows * seq : 0; /* tanh of the capped scores [G*m, nk] */
        float *p = qlt_xmalloc(sizeof(float) * (size_t)(2 * rows * seq + 3 * rows * head_dim + th_floats));
        float *ds = p + rows * seq;
        float *qg = ds + rows * seq, *dog = qg + rows * head_dim, *dqg = dog + rows * head_dim;
        float *th = softcap > 0 ? dqg + rows * head_dim : NULL;
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < batch; b++) {
            for (int kvh = 0; kvh < n_kv_heads; kvh++) {
                const int64_t row0 = (int64_t)b * seq;
                for (int64_t t = 0; t < seq; t++) {
                    memset(dk + (row0 + t) * ks + (int64_t)kvh * head_dim, 0, sizeof(float) * (size_t)head_dim);
                    memset(dv + (row0 + t) * ks + (int64_t)kvh * head_dim, 0, sizeof(float) * (size_t)head_dim);
                }
                for (int blk = 0; blk < nblocks; blk++) {
                    const int64_t t0 = (int64_t)blk * ATT_BLOCK, t1 = t0 + ATT_BLOCK < seq ? t0 + ATT_BLOCK : seq;
                    const int64_t m = t1 - t0, j0 = seg_start[row0 + t0], nk = t1 - j0, gm = group * m;
                    const int64_t qoff = (row0 + t0) * qs + (int64_t)kvh * group * head_dim;
                    const int64_t koff = (row0 + j0) * ks + (int64_t)kvh * head_dim;
                    const int64_t soff = (row0 + t0) * n_heads + (int64_t)kvh * group; /* lse, D of head 0, row t0 */
                    gather_heads(qg, q + qoff, qs, m, group, head_dim);
                    gather_heads(dog, dout + qoff, qs, m, group, head_dim);
                    qlt_cpu_sgemm(0, 1, gm, nk, head_dim, scale, qg, head_dim, k + koff, ks, 0.0f, p, nk);
                    if (th) block_softcap(p, th, gm * nk, softcap);
                    for (int g = 0; g < group; g++)
                        block_probs(p + g * m * nk, m, nk, j0, t0, seg_start + row0, lse + soff + g, NULL, n_heads);
                    qlt_cpu_sgemm(1, 0, nk, head_dim, gm, 1.0f, p, nk, dog, head_dim, 1.0f, dv + koff, ks);
                    qlt_cpu_sgemm(0, 1, gm, nk, head_dim, 1.0f, dog, head_dim, v + koff, ks, 0.0f, ds, nk);
                    for (int g = 0; g < group; g++)
                        block_dscores(ds + g * m * nk, p + g * m * nk, m, nk, scratch + soff + g, n_heads, scale);
                    if (th) block_softcap_grad(ds, th, gm * nk);
                    qlt_cpu_sgemm(0, 0, gm, head_dim, nk, 1.0f, ds, nk, k + koff, ks, 0.0f, dqg, head_dim);
                    scatter_heads(dq + qoff, qs, dqg, m, group, head_dim);
                    qlt_cpu_sgemm(1, 0, nk, head_dim, gm, 1.0f, ds, nk, qg, head_dim, 1.0f, dk + koff, ks);
                }
            }
        }
        free(p);
    }
}
