/* test_cpu_fast.c: the CPU backend's default-mode ops (cpu_fast.h) against the reference ops of cpu_ops.h on
 * the same float inputs, op by op: each must agree to float32 rounding (the tolerance of each check says how
 * much). Shapes are chosen off the ops' block and vector sizes (ragged blocks, odd widths, skinny products
 * that run split across threads), with packed examples and ignored targets where the op has them. Also:
 * qlt_cpu_expf's accuracy, and `bench --device cpu` reporting its GEMM comparison. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"
#include "test_util.h"

static unsigned rng_state = 2024;

static float *random_floats(int64_t n, float scale) { return test_random_floats(&rng_state, n, scale); }

/* e^x over [-87, 88]: within 3e-7 relative of exp (a float rounding is 6e-8; the polynomial adds about as
 * much); the edges: exactly 1 at 0, 0 far below, inf far above, NaN through. */
Test(cpu_fast, expf_accuracy) {
    double worst = 0;
    float at = 0;
    for (float x = -87.0f; x < 88.0f; x += 0.000731f) {
        double err = fabs((double)qlt_cpu_expf(x) - exp((double)x)) / exp((double)x);
        if (err > worst) worst = err, at = x;
    }
    cr_expect_leq(worst, 3e-7, "qlt_cpu_expf: relative error %.3g at %.9g", worst, at);
    cr_expect_eq(qlt_cpu_expf(0.0f), 1.0f);
    cr_expect_eq(qlt_cpu_expf(-100.0f), 0.0f);
    cr_expect_eq(qlt_cpu_expf(-INFINITY), 0.0f);
    cr_expect(isinf(qlt_cpu_expf(100.0f)) && qlt_cpu_expf(100.0f) > 0);
    cr_expect(isnan(qlt_cpu_expf(NAN)));
}

/* OpenBLAS's product against the double-accumulating reference, every transposition, beta 0 and 1, padded
 * leading dimensions, skinny shapes (split across threads) and K = 0. Each element within the float32
 * summation bound: (K + 3) * 2^-24 * (sum_p |a_ip b_pj| + |c_ij before|). */
Test(cpu_fast, sgemm_matches_the_reference) {
    const int64_t shapes[][3] = {{37, 29, 41}, {1, 300, 17}, {300, 16, 576}, {16, 300, 1000}, {2000, 150, 16},
                                 {1030, 16, 70}, {5, 7, 0}};
    int checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int bi = 0; bi < 2; bi++) {
                    const float beta = (float)bi;
                    const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 3, ldc = n + 3;
                    const int64_t arows = ta ? k : m, brows = tb ? n : k;
                    float *a = random_floats(arows * lda + 1, 1.0f), *b = random_floats(brows * ldb + 1, 1.0f);
                    float *c0 = random_floats(m * ldc, 1.0f), *c = test_copy_floats(c0, m * ldc), *ref = test_copy_floats(c0, m * ldc);
                    qlt_cpu_sgemm(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, c, ldc);
                    qlt_cpu_gemm(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, ref, ldc);
                    int64_t bad = 0;
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            double mag = fabs((double)beta * c0[i * ldc + j]);
                            for (int64_t p = 0; p < k; p++)
                                mag += 0.75 * fabs((double)(ta ? a[p * lda + i] : a[i * lda + p]) *
                                                   (tb ? b[j * ldb + p] : b[p * ldb + j]));
                            double bound = (double)(k + 3) * ldexp(1.0, -24) * mag;
                            bad += fabs((double)c[i * ldc + j] - ref[i * ldc + j]) > bound;
                        }
                    cr_expect_eq(bad, 0, "m %lld n %lld k %lld trans %d%d beta %g: %lld elements beyond the bound",
                                 (long long)m, (long long)n, (long long)k, ta, tb, beta, (long long)bad);
                    /* the padding between rows is left alone */
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = n; j < ldc; j++) cr_assert_eq(c[i * ldc + j], c0[i * ldc + j]);
                    free(a), free(b), free(c0), free(c), free(ref);
                    checked++;
                }
    }
    cr_assert_eq(checked, 7 * 8);
}

/* RMSNorm forward (y, rstd) and backward (beta 0 and 1, and in place): within 1e-6 of the largest value. */
Test(cpu_fast, rmsnorm_matches_the_reference) {
    const int64_t n = 70, d = 300;
    float *x = random_floats(n * d, 2.0f), *w = random_floats(d, 1.5f), *dy = random_floats(n * d, 1.0f);
    float *y = malloc(sizeof(float) * n * d), *yr = malloc(sizeof(float) * n * d), rstd[70], rstdr[70];
    qlt_cpu_rmsnorm_fwd_fast(y, rstd, x, w, n, d, 1e-5f);
    qlt_cpu_rmsnorm_fwd(yr, rstdr, x, w, n, d, 1e-5f);
    cr_expect_leq(test_rel_err(y, yr, n * d), 1e-6, "y: %.3g", test_rel_err(y, yr, n * d));
    cr_expect_leq(test_rel_err(rstd, rstdr, n), 1e-6, "rstd: %.3g", test_rel_err(rstd, rstdr, n));
    for (int beta = 0; beta < 2; beta++) {
        float *dx = random_floats(n * d, 1.0f), *dxr = test_copy_floats(dx, n * d);
        qlt_cpu_rmsnorm_bwd_fast(dx, dy, x, rstdr, w, n, d, (float)beta);
        qlt_cpu_rmsnorm_bwd(dxr, dy, x, rstdr, w, n, d, (float)beta);
        cr_expect_leq(test_rel_err(dx, dxr, n * d), 1e-6, "dx beta %d: %.3g", beta, test_rel_err(dx, dxr, n * d));
        free(dx), free(dxr);
    }
    float *inplace = test_copy_floats(dy, n * d), *dxr = malloc(sizeof(float) * n * d);
    qlt_cpu_rmsnorm_bwd_fast(inplace, inplace, x, rstdr, w, n, d, 0.0f);
    qlt_cpu_rmsnorm_bwd(dxr, dy, x, rstdr, w, n, d, 0.0f);
    cr_expect_leq(test_rel_err(inplace, dxr, n * d), 1e-6, "dx in place: %.3g", test_rel_err(inplace, dxr, n * d));
    free(x), free(w), free(dy), free(y), free(yr), free(inplace), free(dxr);
}

/* RoPE both ways at positions up to 5000 (large angles): within 1e-6 of the largest value. */
Test(cpu_fast, rope_matches_the_reference) {
    const int64_t n = 50;
    const int heads = 3, hd = 64;
    int32_t pos[50];
    float inv[32];
    for (int64_t t = 0; t < n; t++) pos[t] = (int32_t)(t * 97 % 5000);
    for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.0f, -(float)(2 * i) / hd);
    for (int inverse = 0; inverse < 2; inverse++) {
        float *x = random_floats(n * heads * hd, 1.0f), *xr = test_copy_floats(x, n * heads * hd);
        qlt_cpu_rope_fast(x, pos, inv, n, heads, hd, inverse);
        qlt_cpu_rope(xr, pos, inv, n, heads, hd, inverse);
        double e = test_rel_err(x, xr, n * heads * hd);
        cr_expect_leq(e, 1e-6, "inverse %d: %.3g", inverse, e);
        free(x), free(xr);
    }
}

/* SwiGLU forward and backward (also in place, dgu = gu), gates up to +-90 (exp overflows): within 1e-6 of
 * the largest value. */
Test(cpu_fast, swiglu_matches_the_reference) {
    const int64_t n = 33, inter = 203;
    float *gu = random_floats(n * 2 * inter, 6.0f), *dh = random_floats(n * inter, 1.0f);
    gu[0] = 90.0f, gu[1] = -90.0f, gu[2] = 30.0f, gu[3] = -30.0f;
    float *h = malloc(sizeof(float) * n * inter), *hr = malloc(sizeof(float) * n * inter);
    qlt_cpu_swiglu_fwd_fast(h, gu, n, inter);
    qlt_cpu_swiglu_fwd(hr, gu, n, inter);
    cr_expect_leq(test_rel_err(h, hr, n * inter), 1e-6, "h: %.3g", test_rel_err(h, hr, n * inter));
    float *dgu = malloc(sizeof(float) * n * 2 * inter), *dgur = malloc(sizeof(float) * n * 2 * inter);
    qlt_cpu_swiglu_bwd_fast(dgu, dh, gu, n, inter);
    qlt_cpu_swiglu_bwd(dgur, dh, gu, n, inter);
    cr_expect_leq(test_rel_err(dgu, dgur, n * 2 * inter), 1e-6, "dgu: %.3g", test_rel_err(dgu, dgur, n * 2 * inter));
    float *inplace = test_copy_floats(gu, n * 2 * inter);
    qlt_cpu_swiglu_bwd_fast(inplace, dh, inplace, n, inter);
    cr_expect_leq(test_rel_err(inplace, dgur, n * 2 * inter), 1e-6, "dgu in place: %.3g",
                  test_rel_err(inplace, dgur, n * 2 * inter));
    free(gu), free(dh), free(h), free(hr), free(dgu), free(dgur), free(inplace);
}

/* Attention forward and backward, 2 rows of 150 tokens (blocks of 64: the last one ragged), 6 query heads on
 * 2 kv heads, the second row packed with examples starting at 0, 40, 100, 101 (one of a single token):
 * out, lse, dq, dk, dv and D (the scratch) within 1e-5 of each one's largest value. */
Test(cpu_fast, attention_matches_the_reference) {
    enum { B = 2, S = 150, NH = 6, NKV = 2, HD = 32 };
    const int64_t n = B * S, qn = n * NH * HD, kn = n * NKV * HD;
    int32_t seg[B * S];
    for (int t = 0; t < S; t++) {
        seg[t] = 0;
        seg[S + t] = t < 40 ? 0 : t < 100 ? 40 : t < 101 ? 100 : 101;
    }
    const float scale = 0.17677669f;
    float *q = random_floats(qn, 2.0f), *k = random_floats(kn, 2.0f), *v = random_floats(kn, 1.0f);
    float *dout = random_floats(qn, 1.0f);
    float *out = malloc(sizeof(float) * qn), *outr = malloc(sizeof(float) * qn);
    float *lse = malloc(sizeof(float) * n * NH), *lser = malloc(sizeof(float) * n * NH);
    qlt_cpu_attention_fwd_fast(out, lse, q, k, v, seg, B, S, NH, NKV, HD, scale);
    qlt_cpu_attention_fwd(outr, lser, q, k, v, seg, B, S, NH, NKV, HD, scale);
    cr_expect_leq(test_rel_err(out, outr, qn), 1e-5, "out: %.3g", test_rel_err(out, outr, qn));
    cr_expect_leq(test_rel_err(lse, lser, n * NH), 1e-5, "lse: %.3g", test_rel_err(lse, lser, n * NH));
    float *dq = malloc(sizeof(float) * qn), *dqr = malloc(sizeof(float) * qn);
    float *dk = malloc(sizeof(float) * kn), *dkr = malloc(sizeof(float) * kn);
    float *dv = malloc(sizeof(float) * kn), *dvr = malloc(sizeof(float) * kn);
    float *sc = malloc(sizeof(float) * n * NH), *scr = malloc(sizeof(float) * n * NH);
    qlt_cpu_attention_bwd_fast(dq, dk, dv, sc, dout, outr, lser, q, k, v, seg, B, S, NH, NKV, HD, scale);
    qlt_cpu_attention_bwd(dqr, dkr, dvr, scr, dout, outr, lser, q, k, v, seg, B, S, NH, NKV, HD, scale);
    cr_expect_leq(test_rel_err(dq, dqr, qn), 1e-5, "dq: %.3g", test_rel_err(dq, dqr, qn));
    cr_expect_leq(test_rel_err(dk, dkr, kn), 1e-5, "dk: %.3g", test_rel_err(dk, dkr, kn));
    cr_expect_leq(test_rel_err(dv, dvr, kn), 1e-5, "dv: %.3g", test_rel_err(dv, dvr, kn));
    cr_expect_leq(test_rel_err(sc, scr, n * NH), 1e-5, "D: %.3g", test_rel_err(sc, scr, n * NH));
    free(q), free(k), free(v), free(dout), free(out), free(outr), free(lse), free(lser);
    free(dq), free(dqr), free(dk), free(dkr), free(dv), free(dvr), free(sc), free(scr);
}

/* Fused lm_head + cross-entropy over 300 tokens (two chunks), some targets ignored: the loss sum within 1e-6
 * relative, dx within 1e-5 of its largest value, ignored rows exactly 0, and the same loss without dx. */
Test(cpu_fast, lm_head_loss_matches_the_reference) {
    const int64_t n = 300, d = 48, vocab = 1000;
    float *x = random_floats(n * d, 1.0f), *w = random_floats(vocab * d, 0.5f);
    int32_t targets[300];
    for (int64_t t = 0; t < n; t++) targets[t] = t % 7 == 3 ? -100 : (int32_t)((t * 131) % vocab);
    float *dx = random_floats(n * d, 1.0f), *dxr = malloc(sizeof(float) * n * d);
    void *scratch = malloc(qlt_cpu_lm_head_loss_fast_scratch(n, vocab));
    float *scratch_ref = malloc(sizeof(double) * (size_t)(n * (vocab + 1)));
    const float grad_scale = 1.0f / 257.0f;
    double loss = qlt_cpu_lm_head_loss_fast(dx, scratch, x, w, targets, n, d, vocab, grad_scale);
    double loss_ref = qlt_cpu_lm_head_loss(dxr, scratch_ref, x, w, targets, n, d, vocab, grad_scale);
    cr_expect_leq(fabs(loss - loss_ref) / loss_ref, 1e-6, "loss %.9g vs %.9g", loss, loss_ref);
    cr_expect_leq(test_rel_err(dx, dxr, n * d), 1e-5, "dx: %.3g", test_rel_err(dx, dxr, n * d));
    int64_t nonzero = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < d && targets[t] < 0; j++) nonzero += dx[t * d + j] != 0.0f;
    cr_expect_eq(nonzero, 0, "%lld gradient elements of ignored tokens are not 0", (long long)nonzero);
    double loss_eval = qlt_cpu_lm_head_loss_fast(NULL, scratch, x, w, targets, n, d, vocab, grad_scale);
    cr_expect_eq(loss_eval, loss);
    free(x), free(w), free(dx), free(dxr), free(scratch), free(scratch_ref);
}

/* The LoRA group of three sites (q/k/v-like widths, outputs side by side in one row), with the workspace and
 * without (site by site), on 70 tokens (the calling thread alone) and 700 (the group split across threads),
 * forward and backward (dx beta 0 and 1, and no dx): u, y, du, dA, dB and dx within 1e-5 of each one's
 * largest value. */
Test(cpu_fast, lora_group_matches_the_reference) {
    enum { K = 3, R = 4 };
    const int64_t in = 40, outs[K] = {24, 8, 8}, ld = 40, np = K * R * (in + 24);
    float *params = random_floats(np, 0.5f), *work = malloc(sizeof(float) * 2 * K * R * in);
    for (int64_t n = 70; n <= 700; n += 630) {
        float *x = random_floats(n * in, 1.0f), *dy = random_floats(n * ld, 1.0f);
        float *u = malloc(sizeof(float) * n * K * R), *ur = malloc(sizeof(float) * n * K * R);
        float *du = malloc(sizeof(float) * n * K * R), *dur = malloc(sizeof(float) * n * K * R);
        for (int with_work = 0; with_work < 2; with_work++)
            for (int variant = 0; variant < 3; variant++) { /* dx beta 0, dx beta 1, no dx */
                float *y = random_floats(n * ld, 1.0f), *yr = test_copy_floats(y, n * ld);
                float *grads = random_floats(np, 0.1f), *gradsr = test_copy_floats(grads, np);
                qlt_lora_site s[K], sr[K];
                int64_t off = 0, col = 0;
                for (int i = 0; i < K; i++) {
                    s[i] = (qlt_lora_site){.y = y + col, .dy = dy + col, .ld = ld, .out = outs[i], .a = params + off,
                                           .b = params + off + R * in, .da = grads + off, .db = grads + off + R * in};
                    sr[i] = s[i];
                    sr[i].y = yr + col, sr[i].da = gradsr + off, sr[i].db = gradsr + off + R * in;
                    off += R * (in + outs[i]);
                    col += outs[i];
                }
                qlt_cpu_lora_fwd_fast(s, K, u, x, n, in, R, 0.5f, work, with_work ? K * R * in : 0);
                qlt_cpu_lora_fwd(sr, K, ur, x, n, in, R, 0.5f);
                cr_expect_leq(test_rel_err(u, ur, n * K * R), 1e-5, "n %lld work %d: u %.3g", (long long)n, with_work,
                              test_rel_err(u, ur, n * K * R));
                cr_expect_leq(test_rel_err(y, yr, n * ld), 1e-5, "n %lld work %d: y %.3g", (long long)n, with_work,
                              test_rel_err(y, yr, n * ld));
                float *dx = variant == 2 ? NULL : random_floats(n * in, 1.0f), *dxr = dx ? test_copy_floats(dx, n * in) : NULL;
                qlt_cpu_lora_bwd_fast(s, K, du, ur, x, dx, (float)variant, n, in, R, 0.5f, work,
                                      with_work ? 2 * K * R * in : 0);
                qlt_cpu_lora_bwd(sr, K, dur, ur, x, dxr, (float)variant, n, in, R, 0.5f);
                cr_expect_leq(test_rel_err(du, dur, n * K * R), 1e-5, "n %lld work %d variant %d: du %.3g", (long long)n,
                              with_work, variant, test_rel_err(du, dur, n * K * R));
                cr_expect_leq(test_rel_err(grads, gradsr, np), 1e-5, "n %lld work %d variant %d: dA, dB %.3g", (long long)n,
                              with_work, variant, test_rel_err(grads, gradsr, np));
                if (dx)
                    cr_expect_leq(test_rel_err(dx, dxr, n * in), 1e-5, "n %lld work %d variant %d: dx %.3g", (long long)n,
                                  with_work, variant, test_rel_err(dx, dxr, n * in));
                free(y), free(yr), free(grads), free(gradsr), free(dx), free(dxr);
            }
        free(x), free(dy), free(u), free(ur), free(du), free(dur);
    }
    free(params), free(work);
}

/* `bench --device cpu` on the demo model's config: it trains and prints tokens/s and the comparison of its
 * frozen-weight GEMMs with OpenBLAS's sgemm alone on the same shapes: 2 layers of 7 products forward, and
 * backward all but layer 0's q/k/v (its input needs no gradient), 4 shapes each way. */
Test(cpu_fast, bench_on_the_cpu_reports_the_gemm_comparison) {
    char *out = NULL;
    int rc = test_run_cli(NULL,
                          "bench --device cpu --model " QLT_TEST_DATA "/../../examples/demo-model/config.json "
                          "--micro-batch 2 --seq 32 --steps 2 --warmup 1 --threads 2",
                          &out);
    cr_assert_eq(rc, 0, "bench failed: %s", out);
    cr_expect(strstr(out, "cpu backend") != NULL, "%s", out);
    cr_expect(strstr(out, "tokens/s") != NULL, "%s", out);
    cr_expect(strstr(out, "frozen-weight GEMMs (25 a step, 8 shapes") != NULL, "%s", out);
    cr_expect(strstr(out, "OpenBLAS sgemm alone on the same shapes") != NULL, "%s", out);
    free(out);
}
