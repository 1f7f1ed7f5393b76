/* test_cpu_attention.c: the CPU attention backward (the oracle the CUDA kernels are checked against)
 * against the same formulas evaluated entirely in double from the same float inputs. Values near a
 * common offset make D = rowsum(dO * O) large and dP - D small, so any sum kept in float shows. And
 * sliding-window attention over packed rows (the seg_window the batch stages) against a mask written out
 * key by key: same example, causal, t - j < window. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cpu/backend_cpu.h"
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"
#include "train/batch.h"

enum { SEQ = 48, NH = 4, NKV = 2, HD = 32 };

static float noise(unsigned *state) { /* uniform in [-1, 1) */
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* dq [SEQ, NH*HD], dk / dv [SEQ, NKV*HD] from q, k, v, out, lse, dout; one row, causal. */
static void reference_bwd(double *dq, double *dk, double *dv, const float *q, const float *k, const float *v,
                          const float *out, const float *lse, const float *dout, float scale) {
    int group = NH / NKV;
    for (int i = 0; i < SEQ * NH * HD; i++) dq[i] = 0;
    for (int i = 0; i < SEQ * NKV * HD; i++) dk[i] = dv[i] = 0;
    for (int t = 0; t < SEQ; t++)
        for (int h = 0; h < NH; h++) {
            const float *qh = q + (t * NH + h) * HD, *oh = out + (t * NH + h) * HD, *doh = dout + (t * NH + h) * HD;
            int kvh = h / group;
            double d = 0;
            for (int e = 0; e < HD; e++) d += (double)oh[e] * doh[e];
            for (int j = 0; j <= t; j++) {
                const float *kj = k + (j * NKV + kvh) * HD, *vj = v + (j * NKV + kvh) * HD;
                double s = 0, dp = 0;
                for (int e = 0; e < HD; e++) {
                    s += (double)qh[e] * kj[e];
                    dp += (double)doh[e] * vj[e];
                }
                double p = exp(s * scale - (double)lse[t * NH + h]), ds = p * (dp - d) * scale;
                for (int e = 0; e < HD; e++) {
                    dq[(t * NH + h) * HD + e] += ds * kj[e];
                    dk[(j * NKV + kvh) * HD + e] += ds * qh[e];
                    dv[(j * NKV + kvh) * HD + e] += p * doh[e];
                }
            }
        }
}

static double rel_err(const float *got, const double *ref, int n) {
    double err = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        err = fmax(err, fabs((double)got[i] - ref[i]));
        mx = fmax(mx, fabs(ref[i]));
    }
    return err / mx;
}

Test(cpu_attention, backward_sums_in_double) {
    static float q[SEQ * NH * HD], k[SEQ * NKV * HD], v[SEQ * NKV * HD], out[SEQ * NH * HD], dout[SEQ * NH * HD];
    static float lse[SEQ * NH], scratch[SEQ * NH], dq[SEQ * NH * HD], dk[SEQ * NKV * HD], dv[SEQ * NKV * HD];
    static double rq[SEQ * NH * HD], rk[SEQ * NKV * HD], rv[SEQ * NKV * HD];
    unsigned st = 12345;
    for (int i = 0; i < SEQ * NH * HD; i++) q[i] = noise(&st);
    for (int i = 0; i < SEQ * NKV * HD; i++) k[i] = noise(&st);
    for (int i = 0; i < SEQ * NKV * HD; i++) v[i] = 4.0f + 1e-3f * noise(&st);
    for (int i = 0; i < SEQ * NH * HD; i++) dout[i] = 3.0f + 1e-2f * noise(&st);
    int32_t seg[SEQ] = {0};
    float scale = 0.17677669f; /* 32 ** -0.5 */
    qlt_cpu_attention_fwd(out, lse, q, k, v, seg, 1, SEQ, NH, NKV, HD, scale);
    qlt_cpu_attention_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, seg, 1, SEQ, NH, NKV, HD, scale);
    reference_bwd(rq, rk, rv, q, k, v, out, lse, dout, scale);
    /* a float rounding of each output: 2^-24 of the largest, a few of them at most */
    double eq = rel_err(dq, rq, SEQ * NH * HD), ek = rel_err(dk, rk, SEQ * NKV * HD), ev = rel_err(dv, rv, SEQ * NKV * HD);
    cr_expect_leq(eq, 2e-7, "dq: max rel err %.3g", eq);
    cr_expect_leq(ek, 2e-7, "dk: max rel err %.3g", ek);
    cr_expect_leq(ev, 2e-7, "dv: max rel err %.3g", ev);
    for (int i = 0; i < SEQ * NH; i++) { /* scratch still holds D as float (the GPU check compares it) */
        double d = 0;
        for (int e = 0; e < HD; e++) d += (double)out[i * HD + e] * dout[i * HD + e];
        cr_assert_eq(scratch[i], (float)d);
    }
}

/* Packed examples of 7, 1, 12, 4, 9, 20, 30 and 40 tokens in two rows of SEQ = 48 (the 20 cut by the row
 * end, several longer than the window), window W = 5: out and dq / dk / dv of both CPU modes against
 * attention with the mask spelled out (j in t's example, j <= t, t - j < W), every sum in double. Without the window (seg_start) the
 * outputs differ, so the test can fail. */
enum { B2 = 2, W = 5 };

static void masked_reference(double *o, double *dq, double *dk, double *dv, const float *q, const float *k,
                             const float *v, const float *dout, const int32_t *doc, float scale) {
    const int group = NH / NKV;
    memset(dq, 0, sizeof(double) * B2 * SEQ * NH * HD);
    memset(dk, 0, sizeof(double) * B2 * SEQ * NKV * HD);
    memset(dv, 0, sizeof(double) * B2 * SEQ * NKV * HD);
    for (int b = 0; b < B2; b++)
        for (int t = 0; t < SEQ; t++)
            for (int h = 0; h < NH; h++) {
                const int row = b * SEQ + t, kvh = h / group;
                const float *qh = q + (row * NH + h) * HD, *doh = dout + (row * NH + h) * HD;
                double s[SEQ], mx = -INFINITY, sum = 0, oh[HD] = {0};
                for (int j = 0; j < SEQ; j++) {
                    s[j] = -INFINITY;
                    if (doc[b * SEQ + j] != doc[row] || j > t || t - j >= W) continue;
                    const float *kj = k + ((b * SEQ + j) * NKV + kvh) * HD;
                    double d = 0;
                    for (int e = 0; e < HD; e++) d += (double)qh[e] * kj[e];
                    s[j] = d * scale;
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < SEQ; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
                for (int j = 0; j < SEQ; j++) {
                    if (s[j] == -INFINITY) continue;
                    s[j] = exp(s[j] - mx) / sum; /* now P */
                    for (int e = 0; e < HD; e++) oh[e] += s[j] * v[((b * SEQ + j) * NKV + kvh) * HD + e];
                }
                double dd = 0;
                for (int e = 0; e < HD; e++) {
                    o[(row * NH + h) * HD + e] = oh[e];
                    dd += oh[e] * doh[e];
                }
                for (int j = 0; j < SEQ; j++) {
                    if (s[j] == -INFINITY) continue;
                    const float *kj = k + ((b * SEQ + j) * NKV + kvh) * HD, *vj = v + ((b * SEQ + j) * NKV + kvh) * HD;
                    double dp = 0;
                    for (int e = 0; e < HD; e++) dp += (double)doh[e] * vj[e];
                    const double ds = s[j] * (dp - dd) * scale;
                    for (int e = 0; e < HD; e++) {
                        dq[(row * NH + h) * HD + e] += ds * kj[e];
                        dk[((b * SEQ + j) * NKV + kvh) * HD + e] += ds * qh[e];
                        dv[((b * SEQ + j) * NKV + kvh) * HD + e] += s[j] * doh[e];
                    }
                }
            }
}

Test(cpu_attention, sliding_window_over_packed_examples) {
    enum { NQ = B2 * SEQ * NH * HD, NK = B2 * SEQ * NKV * HD };
    static float q[NQ], k[NK], v[NK], dout[NQ], out[NQ], dq[NQ], dk[NK], dv[NK], lse[B2 * SEQ * NH],
        scratch[B2 * SEQ * NH], nowin[NQ];
    static double ro[NQ], rq[NQ], rk[NK], rv[NK];
    unsigned st = 777;
    for (int i = 0; i < NQ; i++) q[i] = 2.0f * noise(&st);
    for (int i = 0; i < NK; i++) k[i] = 2.0f * noise(&st);
    for (int i = 0; i < NK; i++) v[i] = noise(&st);
    for (int i = 0; i < NQ; i++) dout[i] = noise(&st);
    /* seg_start [B2, SEQ] of the packed examples; doc [B2, SEQ]: which example each token is */
    static const int lens[] = {7, 1, 12, 4, 9, 20, 30, 40};
    int32_t seg[B2 * SEQ], doc[B2 * SEQ], ids[B2 * SEQ], labels[B2 * SEQ];
    int li = 0, left = lens[0];
    for (int b = 0; b < B2; b++)
        for (int t = 0; t < SEQ; t++) {
            const int r = b * SEQ + t;
            if (left == 0 || t == 0) {
                if (left == 0) left = lens[++li];
                seg[r] = t;
            } else {
                seg[r] = seg[r - 1];
            }
            doc[r] = li * 100 + b; /* an example cut by the row end is two examples */
            left--;
            ids[r] = labels[r] = 1;
        }
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    qlt_batch_buffers bb;
    cr_assert_eq(qlt_batch_buffers_init(&bb, be, B2, SEQ, W), 0);
    qlt_batch_upload(&bb, be, ids, labels, seg);
    const int32_t *segw = bb.dev.seg_window; /* CPU backend memory is host memory */
    const float scale = 0.17677669f;
    masked_reference(ro, rq, rk, rv, q, k, v, dout, doc, scale);
    for (int fast = 0; fast < 2; fast++) {
        const char *mode = fast ? "default mode" : "reference mode";
        if (fast) {
            qlt_cpu_attention_fwd_fast(out, lse, q, k, v, segw, B2, SEQ, NH, NKV, HD, scale);
            qlt_cpu_attention_bwd_fast(dq, dk, dv, scratch, dout, out, lse, q, k, v, segw, B2, SEQ, NH, NKV, HD, scale);
        } else {
            qlt_cpu_attention_fwd(out, lse, q, k, v, segw, B2, SEQ, NH, NKV, HD, scale);
            qlt_cpu_attention_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, segw, B2, SEQ, NH, NKV, HD, scale);
        }
        double eo = rel_err(out, ro, NQ), eq = rel_err(dq, rq, NQ), ek = rel_err(dk, rk, NK), ev = rel_err(dv, rv, NK);
        cr_expect_leq(eo, 1e-5, "%s: out max rel err %.3g", mode, eo);
        cr_expect_leq(eq, 1e-5, "%s: dq max rel err %.3g", mode, eq);
        cr_expect_leq(ek, 1e-5, "%s: dk max rel err %.3g", mode, ek);
        cr_expect_leq(ev, 1e-5, "%s: dv max rel err %.3g", mode, ev);
    }
    qlt_cpu_attention_fwd(nowin, lse, q, k, v, seg, B2, SEQ, NH, NKV, HD, scale);
    cr_expect_gt(rel_err(nowin, ro, NQ), 1e-2, "the window changes nothing: the test would not see it missing");
    qlt_batch_buffers_free(&bb, be);
    be->destroy(be);
}
