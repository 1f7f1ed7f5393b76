/* test_gemma_ops.c: the CPU ops Gemma 2 / 3 add (cpu/gemma_ops.h), op by op: the default mode's against the
 * reference on the same float inputs (as test_cpu_fast.c does for the others), and each reference backward
 * against central differences of its forward: GeGLU (gelu tanh), soft-capped attention, the soft-capped fused
 * lm_head + cross-entropy; and qlt_cpu_tanhf's accuracy. The whole model is checked by test_golden.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_ops.h"
#include "cpu/gemma_ops.h"
#include "test_util.h"

static unsigned rng_state = 2611;

static float *random_floats(int64_t n, float scale) { return test_random_floats(&rng_state, n, scale); }

static double dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* tanh through expf: within 4e-7 absolute of tanh over [-20, 20]; exactly +-1 far out, 0 at 0. */
Test(gemma_ops, tanhf_accuracy) {
    double worst = 0;
    float at = 0;
    for (float x = -20.0f; x < 20.0f; x += 0.000613f) {
        double err = fabs((double)qlt_cpu_tanhf(x) - tanh((double)x));
        if (err > worst) worst = err, at = x;
    }
    cr_expect_leq(worst, 4e-7, "qlt_cpu_tanhf: absolute error %.3g at %.9g", worst, at);
    cr_expect_eq(qlt_cpu_tanhf(0.0f), 0.0f);
    cr_expect_eq(qlt_cpu_tanhf(100.0f), 1.0f);
    cr_expect_eq(qlt_cpu_tanhf(-100.0f), -1.0f);
}

/* GeGLU forward and backward (also in place, dgu = gu), gates up to +-30: within 1e-6 of the largest value;
 * gelu_tanh itself at known points (torch.nn.functional.gelu(x, approximate="tanh") in float64). */
Test(gemma_ops, geglu_matches_the_reference) {
    const int64_t n = 33, inter = 203;
    float *gu = random_floats(n * 2 * inter, 4.0f), *dh = random_floats(n * inter, 1.0f);
    gu[0] = 30.0f, gu[1] = -30.0f, gu[2] = 9.0f, gu[3] = -9.0f;
    float *h = malloc(sizeof(float) * n * inter), *hr = malloc(sizeof(float) * n * inter);
    qlt_cpu_geglu_fwd_fast(h, gu, n, inter);
    qlt_cpu_geglu_fwd(hr, gu, n, inter);
    cr_expect_leq(test_rel_err(h, hr, n * inter), 1e-6, "h: %.3g", test_rel_err(h, hr, n * inter));
    float *dgu = malloc(sizeof(float) * n * 2 * inter), *dgur = malloc(sizeof(float) * n * 2 * inter);
    qlt_cpu_geglu_bwd_fast(dgu, dh, gu, n, inter);
    qlt_cpu_geglu_bwd(dgur, dh, gu, n, inter);
    cr_expect_leq(test_rel_err(dgu, dgur, n * 2 * inter), 1e-6, "dgu: %.3g", test_rel_err(dgu, dgur, n * 2 * inter));
    float *inplace = test_copy_floats(gu, n * 2 * inter);
    qlt_cpu_geglu_bwd_fast(inplace, dh, inplace, n, inter);
    cr_expect_leq(test_rel_err(inplace, dgur, n * 2 * inter), 1e-6, "dgu in place: %.3g",
                  test_rel_err(inplace, dgur, n * 2 * inter));
    /* gelu_tanh(x) * 1 at x = 1, -0.5, 3 */
    const float gate_up[6] = {1.0f, -0.5f, 3.0f, 1.0f, 1.0f, 1.0f};
    const double want[3] = {0.8411919906082768, -0.15428599017485606, 2.996362607918227};
    float got[3];
    qlt_cpu_geglu_fwd(got, gate_up, 1, 3);
    for (int i = 0; i < 3; i++) cr_expect_leq(fabs(got[i] - want[i]), 1e-7, "gelu_tanh[%d] %.9g vs %.9g", i, got[i], want[i]);
    free(gu), free(dh), free(h), free(hr), free(dgu), free(dgur), free(inplace);
}

/* The reference backward against central differences of L = sum(dh * geglu(gu)) on every element. */
Test(gemma_ops, geglu_backward_matches_finite_differences) {
    const int64_t n = 3, inter = 17;
    float *gu = random_floats(n * 2 * inter, 3.0f), *dh = random_floats(n * inter, 1.0f);
    float *dgu = malloc(sizeof(float) * n * 2 * inter), *h = malloc(sizeof(float) * n * inter);
    qlt_cpu_geglu_bwd(dgu, dh, gu, n, inter);
    const float eps = 1e-2f;
    for (int64_t i = 0; i < n * 2 * inter; i++) {
        float keep = gu[i];
        gu[i] = keep + eps;
        qlt_cpu_geglu_fwd(h, gu, n, inter);
        double up = dot(dh, h, n * inter);
        gu[i] = keep - eps;
        qlt_cpu_geglu_fwd(h, gu, n, inter);
        double down = dot(dh, h, n * inter);
        gu[i] = keep;
        double fd = (up - down) / (2.0 * eps);
        cr_expect_leq(fabs(fd - dgu[i]), 1e-3 * fabs(dgu[i]) + 2e-5, "dgu[%lld]: analytic %.7g vs %.7g", (long long)i,
                      dgu[i], fd);
    }
    free(gu), free(dh), free(dgu), free(h);
}

/* Soft-capped attention, 2 rows of 150 tokens (ragged blocks), 6 query heads on 2 kv heads, packed examples,
 * scores well past the cap of 2: the default mode within 1e-5 of the reference (out, lse, dq, dk, dv, D), and
 * the cap changes the output. */
Test(gemma_ops, attention_softcap_matches_the_reference) {
    enum { B = 2, S = 150, NH = 6, NKV = 2, HD = 32 };
    const int64_t n = B * S, qn = n * NH * HD, kn = n * NKV * HD;
    int32_t seg[B * S];
    for (int t = 0; t < S; t++) {
        seg[t] = 0;
        seg[S + t] = t < 40 ? 0 : t < 100 ? 40 : t < 101 ? 100 : 101;
    }
    const float scale = 0.17677669f, cap = 2.0f;
    float *q = random_floats(qn, 2.0f), *k = random_floats(kn, 2.0f), *v = random_floats(kn, 1.0f);
    float *dout = random_floats(qn, 1.0f);
    float *out = malloc(sizeof(float) * qn), *outr = malloc(sizeof(float) * qn), *plain = malloc(sizeof(float) * qn);
    float *lse = malloc(sizeof(float) * n * NH), *lser = malloc(sizeof(float) * n * NH);
    qlt_cpu_attention_softcap_fwd_fast(out, lse, q, k, v, seg, B, S, NH, NKV, HD, scale, cap);
    qlt_cpu_attention_softcap_fwd(outr, lser, q, k, v, seg, B, S, NH, NKV, HD, scale, cap);
    cr_expect_leq(test_rel_err(out, outr, qn), 1e-5, "out: %.3g", test_rel_err(out, outr, qn));
    cr_expect_leq(test_rel_err(lse, lser, n * NH), 1e-5, "lse: %.3g", test_rel_err(lse, lser, n * NH));
    qlt_cpu_attention_fwd(plain, lse, q, k, v, seg, B, S, NH, NKV, HD, scale);
    cr_expect_geq(test_rel_err(plain, outr, qn), 1e-2, "the cap of %g changes nothing: %.3g", cap, test_rel_err(plain, outr, qn));
    float *dq = malloc(sizeof(float) * qn), *dqr = malloc(sizeof(float) * qn);
    float *dk = malloc(sizeof(float) * kn), *dkr = malloc(sizeof(float) * kn);
    float *dv = malloc(sizeof(float) * kn), *dvr = malloc(sizeof(float) * kn);
    float *sc = malloc(sizeof(float) * n * NH), *scr = malloc(sizeof(float) * n * NH);
    qlt_cpu_attention_softcap_bwd_fast(dq, dk, dv, sc, dout, outr, lser, q, k, v, seg, B, S, NH, NKV, HD, scale, cap);
    qlt_cpu_attention_softcap_bwd(dqr, dkr, dvr, scr, dout, outr, lser, q, k, v, seg, B, S, NH, NKV, HD, scale, cap);
    cr_expect_leq(test_rel_err(dq, dqr, qn), 1e-5, "dq: %.3g", test_rel_err(dq, dqr, qn));
    cr_expect_leq(test_rel_err(dk, dkr, kn), 1e-5, "dk: %.3g", test_rel_err(dk, dkr, kn));
    cr_expect_leq(test_rel_err(dv, dvr, kn), 1e-5, "dv: %.3g", test_rel_err(dv, dvr, kn));
    cr_expect_leq(test_rel_err(sc, scr, n * NH), 1e-5, "D: %.3g", test_rel_err(sc, scr, n * NH));
    free(q), free(k), free(v), free(dout), free(out), free(outr), free(plain), free(lse), free(lser);
    free(dq), free(dqr), free(dk), free(dkr), free(dv), free(dvr), free(sc), free(scr);
}

/* The reference backward of soft-capped attention against central differences of L = sum(dout * out), on
 * every element of q, k and v: one row of 10 tokens holding two examples, 2 query heads on 1 kv head. */
Test(gemma_ops, attention_softcap_backward_matches_finite_differences) {
    enum { B = 1, S = 10, NH = 2, NKV = 1, HD = 8 };
    const int64_t n = B * S, qn = n * NH * HD, kn = n * NKV * HD;
    int32_t seg[S] = {0, 0, 0, 0, 4, 4, 4, 4, 4, 4};
    const float scale = 0.35355339f, cap = 1.5f;
    float *q = random_floats(qn, 2.0f), *k = random_floats(kn, 2.0f), *v = random_floats(kn, 1.0f);
    float *dout = random_floats(qn, 1.0f), *out = malloc(sizeof(float) * qn), *lse = malloc(sizeof(float) * n * NH);
    float *dq = malloc(sizeof(float) * qn), *dk = malloc(sizeof(float) * kn), *dv = malloc(sizeof(float) * kn);
    float *sc = malloc(sizeof(float) * n * NH);
    qlt_cpu_attention_softcap_fwd(out, lse, q, k, v, seg, B, S, NH, NKV, HD, scale, cap);
    qlt_cpu_attention_softcap_bwd(dq, dk, dv, sc, dout, out, lse, q, k, v, seg, B, S, NH, NKV, HD, scale, cap);
    float *inputs[3] = {q, k, v};
    const float *grads[3] = {dq, dk, dv};
    const int64_t counts[3] = {qn, kn, kn};
    const float eps = 1e-2f;
    for (int which = 0; which < 3; which++) {
        for (int64_t i = 0; i < counts[which]; i++) {
            float *x = inputs[which], keep = x[i];
            x[i] = keep + eps;
            qlt_cpu_attention_softcap_fwd(out, lse, q, k, v, seg, B, S, NH, NKV, HD, scale, cap);
            double up = dot(dout, out, qn);
            x[i] = keep - eps;
            qlt_cpu_attention_softcap_fwd(out, lse, q, k, v, seg, B, S, NH, NKV, HD, scale, cap);
            double down = dot(dout, out, qn);
            x[i] = keep;
            double fd = (up - down) / (2.0 * eps), an = grads[which][i];
            cr_expect_leq(fabs(fd - an), 2e-3 * fabs(an) + 5e-5, "%c[%lld]: analytic %.7g vs %.7g", "qkv"[which],
                          (long long)i, an, fd);
        }
    }
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv), free(sc);
}

/* The soft-capped fused lm_head + cross-entropy over 300 tokens (two chunks of the default mode), ignored
 * targets, logits past the cap of 3: the default mode within 1e-6 (loss) / 1e-5 (dx) of the reference, and the
 * reference dx against central differences of its loss on a spread of elements of x. */
Test(gemma_ops, lm_head_loss_softcap_matches_the_reference) {
    const int64_t n = 300, d = 48, vocab = 1000;
    const float cap = 3.0f, grad_scale = 1.0f / 257.0f;
    float *x = random_floats(n * d, 1.0f), *w = random_floats(vocab * d, 0.5f);
    int32_t targets[300];
    for (int64_t t = 0; t < n; t++) targets[t] = t % 7 == 3 ? -100 : (int32_t)((t * 131) % vocab);
    float *dx = malloc(sizeof(float) * n * d), *dxr = malloc(sizeof(float) * n * d);
    void *scratch = malloc(qlt_cpu_lm_head_loss_fast_scratch(n, vocab));
    float *scratch_ref = malloc(sizeof(double) * (size_t)(n * (vocab + 1)));
    double loss = qlt_cpu_lm_head_loss_softcap_fast(dx, scratch, x, w, targets, n, d, vocab, grad_scale, cap);
    double loss_ref = qlt_cpu_lm_head_loss_softcap(dxr, scratch_ref, x, w, targets, n, d, vocab, grad_scale, cap);
    cr_expect_leq(fabs(loss - loss_ref) / loss_ref, 1e-6, "loss %.9g vs %.9g", loss, loss_ref);
    cr_expect_leq(test_rel_err(dx, dxr, n * d), 1e-5, "dx: %.3g", test_rel_err(dx, dxr, n * d));
    double plain = qlt_cpu_lm_head_loss(NULL, scratch_ref, x, w, targets, n, d, vocab, grad_scale);
    cr_expect_geq(fabs(plain - loss_ref) / loss_ref, 1e-2, "the cap of %g changes nothing", cap);
    const float eps = 1e-3f;
    for (int64_t i = 5; i < n * d; i += 997) {
        float keep = x[i];
        x[i] = keep + eps;
        double up = qlt_cpu_lm_head_loss_softcap(NULL, scratch_ref, x, w, targets, n, d, vocab, grad_scale, cap);
        x[i] = keep - eps;
        double down = qlt_cpu_lm_head_loss_softcap(NULL, scratch_ref, x, w, targets, n, d, vocab, grad_scale, cap);
        x[i] = keep;
        double fd = grad_scale * (up - down) / (2.0 * eps);
        cr_expect_leq(fabs(fd - dxr[i]), 1e-4 * fabs(dxr[i]) + 1e-8, "dx[%lld]: analytic %.7g vs %.7g", (long long)i,
                      dxr[i], fd);
    }
    free(x), free(w), free(dx), free(dxr), free(scratch), free(scratch_ref);
}
