/* test_cpu_attention.c: the CPU attention backward (the oracle the CUDA kernels are checked against)
 * against the same formulas evaluated entirely in double from the same float inputs. Values near a
 * common offset make D = rowsum(dO * O) large and dP - D small, so any sum kept in float shows. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu_ops.h"

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
