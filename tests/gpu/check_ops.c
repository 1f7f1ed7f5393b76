/* check_ops.c: every CUDA op against the float32 CPU reference (src/cpu), through the qlt_backend table.
 * Inputs are random, non-zero and rounded to bf16 on the host first, so both sides see identical
 * values; every output buffer is poisoned (all-ones bit patterns = NaN) before the op runs, so an
 * element the kernel forgets to write shows up as NaN and fails. Errors are max|gpu - ref| / max|ref|.
 * Tolerances: bf16 outputs 1e-2 (one bf16 rounding is 2^-9 of the value); fp32 outputs 1e-4 or tighter;
 * AdamW 1e-6 (expected bit-exact). Timing rows (perf) at the end: attention fwd/bwd and the lm_head
 * loss at the sizes of a 7B model, and the three backward_a GEMM precisions. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/dtype.h"
#include "common/error.h"
#include "cpu/backend_cpu.h"
#include "cpu/cpu_ops.h"
#include "cuda/backend_cuda.h"
#include "gpu_check.h"
#include "nf4/nf4.h"

/* ---- helpers ---- */

static qlt_backend *G;
static int g_tried;

static qlt_backend *gpu(void) {
    if (!g_tried) {
        g_tried = 1;
        G = qlt_backend_cuda_create(0);
        if (!G) gpu_check_fail("cuda_create", qlt_error());
        /* QLT_GPU_CHECK_DEQUANT_CACHE=GIB: the checks with the frozen weights kept dequantized
         * (train.dequant_cache_gib: the ops read weight_cache.cu's entries, with their own row strides) */
        const char *cache = getenv("QLT_GPU_CHECK_DEQUANT_CACHE");
        if (G && cache) G->dequant_cache_bytes = (int64_t)(atof(cache) * 1073741824.0);
    }
    return G;
}

#define MAX_DEV 128
static void *dev_ptrs[MAX_DEV];
static int n_dev;

static void *dalloc(size_t bytes) {
    void *p = G->alloc(G, bytes);
    if (!p) {
        fprintf(stderr, "check_ops: device allocation of %zu bytes failed\n", bytes);
        exit(2);
    }
    if (n_dev < MAX_DEV) dev_ptrs[n_dev++] = p;
    return p;
}

static void dfree_all(void) {
    G->sync(G);
    for (int i = 0; i < n_dev; i++) G->free(G, dev_ptrs[i]);
    n_dev = 0;
}

static float bfr(float x) { return qlt_bf16_to_f32(qlt_f32_to_bf16(x)); }

/* host random array rounded to bf16 (caller frees) */
static float *hrand(gpu_rng *r, int64_t n, float scale) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = bfr(gpu_rng_normal(r) * scale);
    return x;
}

static float *hrand_f32(gpu_rng *r, int64_t n, float scale) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = gpu_rng_normal(r) * scale;
    return x;
}

static float *hcopy(const float *x, int64_t n) {
    float *y = malloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(y, x, sizeof(float) * (size_t)n);
    return y;
}

static void *dbf16(const float *h, int64_t n) {
    uint16_t *t = malloc(2 * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) t[i] = qlt_f32_to_bf16(h[i]);
    void *d = dalloc(2 * (size_t)(n ? n : 1));
    G->upload(G, d, t, 2 * (size_t)n);
    free(t);
    return d;
}

static float *df32(const float *h, int64_t n) {
    float *d = dalloc(4 * (size_t)(n ? n : 1));
    G->upload(G, d, h, 4 * (size_t)n);
    return d;
}

static int32_t *di32(const int32_t *h, int64_t n) {
    int32_t *d = dalloc(4 * (size_t)(n ? n : 1));
    G->upload(G, d, h, 4 * (size_t)n);
    return d;
}

static void dpoison_fill(void *d, size_t bytes) {
    unsigned char *t = malloc(bytes ? bytes : 1);
    memset(t, 0xff, bytes);
    G->upload(G, d, t, bytes);
    free(t);
}

static void *dpoison(size_t bytes) {
    void *d = dalloc(bytes ? bytes : 1);
    dpoison_fill(d, bytes);
    return d;
}

static float *hget_bf16(const void *d, int64_t n) {
    uint16_t *t = malloc(2 * (size_t)(n ? n : 1));
    G->download(G, t, d, 2 * (size_t)n);
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = qlt_bf16_to_f32(t[i]);
    free(t);
    return x;
}

static float *hget_f32(const float *d, int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    G->download(G, x, d, 4 * (size_t)n);
    return x;
}

static void row(const char *name, const char *shape, const float *got, const float *ref, int64_t n, double tol) {
    gpu_check_row(name, shape, gpu_rel_err(got, ref, n), tol, "rel");
}

/* an uploaded bf16 weight [rows, cols] from host floats (already bf16-rounded) */
static int weight(qlt_weight *w, const float *h, int64_t rows, int64_t cols) {
    if (G->weight_create(G, w, h, QLT_DTYPE_F32, rows, cols, 0, 0) != 0) {
        gpu_check_fail("weight_create", qlt_error());
        return -1;
    }
    return 0;
}

/* w [rows, cols] (host floats) replaced by its NF4 round trip (blocksize 64, double quant) on the CPU: what
 * the GPU multiplies after dequantizing the same bytes, so a reference computed from it isolates the op */
static int nf4_reference(float *w, int64_t rows, int64_t cols) {
    qlt_backend *cpu = qlt_backend_cpu_create(1, 1);
    qlt_weight cw;
    int rc = cpu->weight_create(cpu, &cw, w, QLT_DTYPE_F32, rows, cols, 64, 1);
    if (rc == 0) {
        qlt_nf4_dequantize_f32(&cw.nf4, w);
        cpu->weight_free(cpu, &cw);
    } else {
        gpu_check_fail("weight_create cpu", qlt_error());
    }
    cpu->destroy(cpu);
    return rc;
}

/* packed examples: each row split into segments of random lengths (1 .. max_len) */
/* examples in the fullest row of seg_start [batch, seq]: the max_row_examples that takes cuDNN's ragged
 * attention for it */
static int max_row_segments(const int32_t *seg, int batch, int seq) {
    int most = 0;
    for (int b = 0; b < batch; b++) {
        int c = 0;
        for (int t = 0; t < seq; t++) c += seg[(int64_t)b * seq + t] == t;
        most = c > most ? c : most;
    }
    return most;
}

static void make_segments(int32_t *seg, gpu_rng *r, int batch, int seq, int max_len) {
    for (int b = 0; b < batch; b++) {
        int start = 0, left = 0;
        for (int t = 0; t < seq; t++) {
            if (left == 0) {
                start = t;
                left = 1 + (int)(gpu_rng_uniform(r) * max_len);
            }
            seg[(int64_t)b * seq + t] = start;
            left--;
        }
    }
}

/* ---- embed ---- */

void check_embed(void) {
    if (!gpu()) return;
    gpu_rng r = {11};
    const int64_t shapes[][3] = {{50, 96, 7}, {37, 64, 300}, {101, 20, 33}};
    for (int s = 0; s < 3; s++) {
        int64_t V = shapes[s][0], D = shapes[s][1], n = shapes[s][2];
        float *tab = hrand(&r, V * D, 1.0f);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)(gpu_rng_uniform(&r) * V);
        qlt_weight w;
        if (weight(&w, tab, V, D)) return;
        void *x = dpoison(2 * (size_t)(n * D));
        G->embed(G, x, di32(ids, n), &w, n);
        float *got = hget_bf16(x, n * D), *ref = malloc(sizeof(float) * (size_t)(n * D));
        for (int64_t t = 0; t < n; t++) memcpy(ref + t * D, tab + ids[t] * D, sizeof(float) * (size_t)D);
        char sh[64];
        snprintf(sh, sizeof sh, "V%lld D%lld N%lld", (long long)V, (long long)D, (long long)n);
        row("embed", sh, got, ref, n * D, 0.0);
        G->weight_free(G, &w);
        dfree_all();
        free(tab), free(ids), free(got), free(ref);
    }
}

/* ---- rmsnorm ---- */

void check_rmsnorm(void) {
    if (!gpu()) return;
    gpu_rng r = {12};
    /* d: below a warp's 256 (64, 96), rows held by one warp in 4, 6, 8 chunks a lane (896, 1536, 2048), rows
     * held by a block of four warps (3072, 3584, 4096), one too wide for either (5120: streamed), and
     * d % 8 != 0 (36: scalar) */
    const int64_t shapes[][2] = {{1, 64},   {7, 96},    {300, 896}, {33, 36},  {64, 3584},
                                 {40, 1536}, {17, 2048}, {9, 3072},  {3, 4096}, {5, 5120}};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        int64_t n = shapes[s][0], d = shapes[s][1];
        char sh[64];
        snprintf(sh, sizeof sh, "N%lld D%lld", (long long)n, (long long)d);
        float *x = hrand(&r, n * d, 1.5f), *w = hrand_f32(&r, d, 1.0f), *dy = hrand(&r, n * d, 1.0f);
        float *dx0 = hrand(&r, n * d, 1.0f);
        float *y_ref = malloc(sizeof(float) * (size_t)(n * d)), *rstd_ref = malloc(sizeof(float) * (size_t)n);
        qlt_cpu_rmsnorm_fwd(y_ref, rstd_ref, x, w, n, d, 1e-6f);
        void *dxp = dbf16(x, n * d), *dyp = dpoison(2 * (size_t)(n * d));
        float *drstd = dpoison(4 * (size_t)n), *dw = df32(w, d);
        G->rmsnorm_fwd(G, dyp, drstd, dxp, dw, n, d, 1e-6f);
        float *y = hget_bf16(dyp, n * d), *rs = hget_f32(drstd, n);
        row("rmsnorm_fwd y", sh, y, y_ref, n * d, 1e-2);
        row("rmsnorm_fwd rstd", sh, rs, rstd_ref, n, 1e-5);
        for (int beta = 0; beta <= 1; beta++) {
            float *ref = hcopy(dx0, n * d);
            qlt_cpu_rmsnorm_bwd(ref, dy, x, rstd_ref, w, n, d, (float)beta);
            void *ddx = beta ? dbf16(dx0, n * d) : dpoison(2 * (size_t)(n * d));
            G->rmsnorm_bwd(G, ddx, dbf16(dy, n * d), dxp, df32(rstd_ref, n), dw, n, d, (float)beta);
            float *got = hget_bf16(ddx, n * d);
            row(beta ? "rmsnorm_bwd beta1" : "rmsnorm_bwd beta0", sh, got, ref, n * d, 1e-2);
            free(ref), free(got);
        }
        dfree_all();
        free(x), free(w), free(dy), free(dx0), free(y_ref), free(rstd_ref), free(y), free(rs);
    }
}

/* ---- rope ---- */

void check_rope(void) {
    if (!gpu()) return;
    gpu_rng r = {13};
    /* head dims with half % 4 == 0 take the four-pair kernel; 20 (half 10) the one-pair kernel */
    const int shapes[][3] = {{7, 4, 16}, {300, 14, 64}, {33, 2, 128}, {5, 8, 32}, {9, 3, 20}};
    for (int s = 0; s < 5; s++) {
        int64_t n = shapes[s][0];
        int heads = shapes[s][1], hd = shapes[s][2];
        int64_t cnt = n * heads * hd;
        float *inv = malloc(sizeof(float) * (size_t)(hd / 2));
        for (int i = 0; i < hd / 2; i++) inv[i] = powf(1000000.0f, -2.0f * i / hd);
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
        for (int64_t t = 0; t < n; t++) pos[t] = (int32_t)(gpu_rng_uniform(&r) * 8192);
        for (int inverse = 0; inverse <= 1; inverse++) {
            float *x = hrand(&r, cnt, 1.0f), *ref = hcopy(x, cnt);
            qlt_cpu_rope(ref, pos, inv, n, heads, hd, inverse);
            void *dx = dbf16(x, cnt);
            G->rope(G, dx, di32(pos, n), df32(inv, hd / 2), n, heads, hd, inverse);
            float *got = hget_bf16(dx, cnt);
            char sh[64];
            snprintf(sh, sizeof sh, "N%lld H%d hd%d%s", (long long)n, heads, hd, inverse ? " inv" : "");
            row("rope", sh, got, ref, cnt, 1e-2);
            free(x), free(ref), free(got);
        }
        dfree_all();
        free(inv), free(pos);
    }
}

/* ---- swiglu (stacked gate|up rows), add, copy, dropout ---- */

void check_swiglu(void) {
    if (!gpu()) return;
    gpu_rng r = {24};
    /* I % 8 != 0 takes the scalar kernel, I % 8 == 0 the 16-byte one */
    const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 100}, {300, 896}, {64, 4864}};
    for (int s = 0; s < 5; s++) {
        int64_t n = shapes[s][0], inter = shapes[s][1], cnt = n * inter;
        char sh[64];
        snprintf(sh, sizeof sh, "N%lld I%lld", (long long)n, (long long)inter);
        float *gu = hrand(&r, 2 * cnt, 2.0f), *dh = hrand(&r, cnt, 1.0f);
        float *h_ref = malloc(sizeof(float) * (size_t)cnt), *dgu_ref = malloc(sizeof(float) * (size_t)(2 * cnt));
        qlt_cpu_swiglu_fwd(h_ref, gu, n, inter);
        qlt_cpu_swiglu_bwd(dgu_ref, dh, gu, n, inter);
        void *dgu = dbf16(gu, 2 * cnt), *ddh = dbf16(dh, cnt), *hh = dpoison(2 * (size_t)cnt);
        void *dout = dpoison(4 * (size_t)cnt);
        G->swiglu_fwd(G, hh, dgu, n, inter);
        G->swiglu_bwd(G, dout, ddh, dgu, n, inter);
        float *h1 = hget_bf16(hh, cnt), *h2 = hget_bf16(dout, 2 * cnt);
        row("swiglu_fwd", sh, h1, h_ref, cnt, 1e-2);
        row("swiglu_bwd d(gate|up)", sh, h2, dgu_ref, 2 * cnt, 1e-2);
        G->swiglu_bwd(G, dgu, ddh, dgu, n, inter); /* in place: the gradient over its input */
        float *h3 = hget_bf16(dgu, 2 * cnt);
        row("swiglu_bwd in place", sh, h3, h2, 2 * cnt, 0.0);
        dfree_all();
        free(gu), free(dh), free(h_ref), free(dgu_ref), free(h1), free(h2), free(h3);
    }
}

void check_elementwise(void) {
    if (!gpu()) return;
    gpu_rng r = {14};
    const int64_t counts[] = {1, 7, 1000, 300 * 896};
    for (int s = 0; s < 4; s++) {
        int64_t n = counts[s];
        char sh[64];
        snprintf(sh, sizeof sh, "count %lld", (long long)n);
        float *g = hrand(&r, n, 2.0f), *u = hrand(&r, n, 1.0f);
        void *dg = dbf16(g, n), *du = dbf16(u, n);
        /* add (out separate, and aliased with a) and copy */
        float *sum = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) sum[i] = g[i] + u[i];
        void *o = dpoison(2 * (size_t)n);
        G->add(G, o, dg, du, n);
        float *h4 = hget_bf16(o, n);
        row("add", sh, h4, sum, n, 1e-2);
        G->add(G, dg, dg, du, n);
        float *h5 = hget_bf16(dg, n);
        row("add aliased", sh, h5, sum, n, 1e-2);
        void *c = dpoison(2 * (size_t)n);
        G->copy(G, c, du, n);
        float *h6 = hget_bf16(c, n);
        row("copy", sh, h6, u, n, 0.0);
        /* dropout: identical keep mask (count of disagreements) and values */
        float p = 0.1f;
        uint64_t seed = 0x1234567890abcdefull + (uint64_t)s, off = 77;
        float *d_ref = malloc(sizeof(float) * (size_t)n);
        qlt_cpu_dropout(d_ref, u, n, p, qlt_dropout_seed(seed, off));
        void *dd = dpoison(2 * (size_t)n);
        uint64_t *dseed = dalloc(sizeof seed);
        G->upload(G, dseed, &seed, sizeof seed);
        G->dropout(G, dd, du, n, p, dseed, off);
        float *h7 = hget_bf16(dd, n);
        int64_t mism = 0;
        for (int64_t i = 0; i < n; i++) mism += (h7[i] == 0.0f) != (d_ref[i] == 0.0f);
        gpu_check_row("dropout mask mismatches", sh, (double)mism, 0.0, "count");
        row("dropout values", sh, h7, d_ref, n, 1e-2);
        dfree_all();
        free(g), free(u), free(sum), free(h4), free(h5), free(h6), free(d_ref), free(h7);
    }
}

/* ---- fused norms: residual add + RMSNorm; Qwen3 head norm + RoPE (forward, backward, in place) ---- */

void check_fused_norms(void) {
    if (!gpu()) return;
    gpu_rng r = {25};
    const int64_t add_shapes[][2] = {{1, 64}, {7, 100}, {300, 896}, {33, 3584}, {40, 1536}, {5, 5120}};
    for (int s = 0; s < 6; s++) {
        int64_t n = add_shapes[s][0], d = add_shapes[s][1];
        char sh[64];
        snprintf(sh, sizeof sh, "N%lld D%lld", (long long)n, (long long)d);
        float *a = hrand(&r, n * d, 1.0f), *b = hrand(&r, n * d, 1.0f), *w = hrand_f32(&r, d, 1.0f);
        float *sum_ref = malloc(sizeof(float) * (size_t)(n * d)), *y_ref = malloc(sizeof(float) * (size_t)(n * d));
        float *rstd_ref = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n * d; i++) sum_ref[i] = bfr(a[i] + b[i]); /* the sum is stored in bf16 */
        qlt_cpu_rmsnorm_fwd(y_ref, rstd_ref, sum_ref, w, n, d, 1e-6f);
        void *dsum = dpoison(2 * (size_t)(n * d)), *dy = dpoison(2 * (size_t)(n * d));
        float *drstd = dpoison(4 * (size_t)n);
        G->add_rmsnorm_fwd(G, dsum, dy, drstd, dbf16(a, n * d), dbf16(b, n * d), df32(w, d), n, d, 1e-6f);
        float *gs = hget_bf16(dsum, n * d), *gy = hget_bf16(dy, n * d), *gr = hget_f32(drstd, n);
        row("add_rmsnorm sum", sh, gs, sum_ref, n * d, 0.0);
        row("add_rmsnorm y", sh, gy, y_ref, n * d, 1e-2);
        row("add_rmsnorm rstd", sh, gr, rstd_ref, n, 1e-5);
        dfree_all();
        free(a), free(b), free(w), free(sum_ref), free(y_ref), free(rstd_ref), free(gs), free(gy), free(gr);
    }
    /* hd 320: wider than the fused kernel's registers, the unfused fallback */
    const int hnr_shapes[][3] = {{7, 4, 16}, {300, 16, 128}, {33, 2, 64}, {5, 8, 256}, {9, 3, 100}, {6, 2, 320}};
    for (int s = 0; s < 6; s++) {
        int64_t n = hnr_shapes[s][0];
        int heads = hnr_shapes[s][1], hd = hnr_shapes[s][2];
        int64_t cnt = n * heads * hd;
        char sh[64];
        snprintf(sh, sizeof sh, "N%lld H%d hd%d", (long long)n, heads, hd);
        float *inv = malloc(sizeof(float) * (size_t)(hd / 2));
        for (int i = 0; i < hd / 2; i++) inv[i] = powf(1000000.0f, -2.0f * i / hd);
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
        for (int64_t t = 0; t < n; t++) pos[t] = (int32_t)(gpu_rng_uniform(&r) * 8192);
        float *x = hrand(&r, cnt, 1.0f), *w = hrand_f32(&r, hd, 1.0f), *gdy = hrand(&r, cnt, 1.0f);
        float *y_ref = malloc(sizeof(float) * (size_t)cnt), *rstd_ref = malloc(sizeof(float) * (size_t)(n * heads));
        qlt_cpu_rmsnorm_fwd(y_ref, rstd_ref, x, w, n * heads, hd, 1e-6f);
        qlt_cpu_rope(y_ref, pos, inv, n, heads, hd, 0);
        float *dx_ref = hcopy(gdy, cnt);
        qlt_cpu_rope(dx_ref, pos, inv, n, heads, hd, 1);
        qlt_cpu_rmsnorm_bwd(dx_ref, dx_ref, x, rstd_ref, w, n * heads, hd, 0.0f);
        void *dxp = dbf16(x, cnt), *dyp = dpoison(2 * (size_t)cnt), *ddx = dpoison(2 * (size_t)cnt);
        float *drstd = dpoison(4 * (size_t)(n * heads)), *dw = df32(w, hd), *dinv = df32(inv, hd / 2);
        int32_t *dpos = di32(pos, n);
        G->head_norm_rope_fwd(G, dyp, drstd, dxp, dw, dpos, dinv, n, heads, hd, 1e-6f);
        float *gy = hget_bf16(dyp, cnt), *gr = hget_f32(drstd, n * heads);
        row("head_norm_rope_fwd y", sh, gy, y_ref, cnt, 1e-2);
        row("head_norm_rope_fwd rstd", sh, gr, rstd_ref, n * heads, 1e-5);
        void *dgy = dbf16(gdy, cnt);
        G->head_norm_rope_bwd(G, ddx, dgy, dxp, df32(rstd_ref, n * heads), dw, dpos, dinv, n, heads, hd);
        float *gdx = hget_bf16(ddx, cnt);
        row("head_norm_rope_bwd dx", sh, gdx, dx_ref, cnt, 1e-2);
        G->head_norm_rope_bwd(G, dgy, dgy, dxp, df32(rstd_ref, n * heads), dw, dpos, dinv, n, heads, hd);
        float *gin = hget_bf16(dgy, cnt);
        row("head_norm_rope_bwd in place", sh, gin, gdx, cnt, 0.0);
        dfree_all();
        free(inv), free(pos), free(x), free(w), free(gdy), free(y_ref), free(rstd_ref), free(dx_ref), free(gy), free(gr);
        free(gdx), free(gin);
    }
}

/* ---- linear forward / backward-x ---- */

void check_linear(void) {
    if (!gpu()) return;
    gpu_rng r = {15};
    const int64_t shapes[][3] = {{1, 64, 96}, {7, 896, 896}, {300, 130, 64}, {300, 896, 4864}};
    for (int s = 0; s < 4; s++) {
        int64_t n = shapes[s][0], rows = shapes[s][1], cols = shapes[s][2];
        char sh[64];
        snprintf(sh, sizeof sh, "N%lld out%lld in%lld", (long long)n, (long long)rows, (long long)cols);
        float *x = hrand(&r, n * cols, 1.0f), *w = hrand(&r, rows * cols, 0.05f), *bias = hrand_f32(&r, rows, 0.5f);
        qlt_weight wt;
        if (weight(&wt, w, rows, cols)) return;
        void *dx = dbf16(x, n * cols);
        /* 0: no bias; 1: a prepared bias (fused into the GEMM by cuBLASLt); 2: an unprepared one (kernel) */
        for (int with_bias = 0; with_bias <= 2; with_bias++) {
            float *ref = malloc(sizeof(float) * (size_t)(n * rows));
            qlt_cpu_gemm(0, 1, n, rows, cols, 1.0f, x, cols, w, cols, 0.0f, ref, rows);
            if (with_bias)
                for (int64_t t = 0; t < n; t++)
                    for (int64_t o = 0; o < rows; o++) ref[t * rows + o] += bias[o];
            void *y = dpoison(2 * (size_t)(n * rows));
            const qlt_weight *wp = &wt;
            float *db = with_bias ? df32(bias, rows) : NULL;
            if (with_bias == 1 && G->bias_prepare(G, db, rows) != 0) gpu_check_fail("bias_prepare", qlt_error());
            G->linear_fwd(G, y, dx, &wp, 1, db, n);
            float *got = hget_bf16(y, n * rows);
            row(with_bias == 0 ? "linear_fwd" : with_bias == 1 ? "linear_fwd +bias (fused)" : "linear_fwd +bias (kernel)",
                sh, got, ref, n * rows, 1e-2);
            free(ref), free(got);
        }
        /* backward-x in the three precisions, beta 0 and 1; a large-|dy| case for the fp16 guard */
        static const char *mode_names[] = {"bf16", "fp16", "fp32"};
        static const double mode_tol[] = {1e-2, 5e-3, 5e-3};
        for (int big = 0; big <= 2; big++) {
            float dscale = big == 1 ? 3.0e5f : big == 2 ? 1.0e-7f : 1.0f; /* overflow / underflow probes */
            float *dy = hrand(&r, n * rows, dscale), *dx0 = hrand(&r, n * cols, 1.0f);
            float *got_fp32 = NULL;
            for (int beta = 0; beta <= 1; beta++) {
                if (big && beta) continue;
                float *ref = hcopy(dx0, n * cols);
                for (int64_t i = 0; i < n * cols; i++) ref[i] *= dscale; /* keep beta*dx on dy's scale */
                float *dx0s = hcopy(ref, n * cols);
                for (int64_t i = 0; i < n * cols; i++) dx0s[i] = bfr(dx0s[i]), ref[i] = dx0s[i];
                qlt_cpu_gemm(0, 0, n, cols, rows, 1.0f, dy, rows, w, cols, (float)beta, ref, cols);
                void *ddy = dbf16(dy, n * rows);
                for (int mode = 2; mode >= 0; mode--) {
                    G->backward_a = (qlt_backward_a)mode;
                    void *ddx = beta ? dbf16(dx0s, n * cols) : dpoison(2 * (size_t)(n * cols));
                    const qlt_weight *wp = &wt;
                    G->linear_bwd_x(G, ddx, ddy, &wp, 1, n, (float)beta);
                    float *got = hget_bf16(ddx, n * cols);
                    char name[64];
                    snprintf(name, sizeof name, "linear_bwd_x %s%s%s", mode_names[mode], beta ? " beta1" : "",
                             big == 1 ? " |dy|>65504" : big == 2 ? " |dy|~1e-7" : "");
                    row(name, sh, got, ref, n * cols, big == 1 && mode == 0 ? 1e-2 : mode_tol[mode]);
                    if (mode == 2) got_fp32 = got;
                    else {
                        snprintf(name, sizeof name, "bwd_x %s vs fp32%s", mode_names[mode], beta ? " beta1" : "");
                        if (!big) row(name, sh, got, got_fp32, n * cols, mode_tol[mode]);
                        free(got);
                    }
                }
                G->backward_a = QLT_BACKWARD_A_BF16;
                free(got_fp32), got_fp32 = NULL;
                free(ref), free(dx0s);
            }
            free(dy), free(dx0);
        }
        G->weight_free(G, &wt);
        dfree_all();
        free(x), free(w), free(bias);
    }
}

/* the group's weights [outs_i, in] uploaded (NF4: the host copies replaced by their dequantized values) */
static int group_weights(gpu_rng *r, qlt_weight *wt, const qlt_weight **wp, float **w, const int64_t *outs, int k,
                         int64_t in, int nf4) {
    for (int i = 0; i < k; i++) {
        w[i] = hrand(r, outs[i] * in, 0.05f);
        if (G->weight_create(G, &wt[i], w[i], QLT_DTYPE_F32, outs[i], in, nf4 ? 64 : 0, 1) != 0) {
            gpu_check_fail("weight_create", qlt_error());
            return -1;
        }
        if (nf4 && nf4_reference(w[i], outs[i], in)) return -1;
        wp[i] = &wt[i];
    }
    return 0;
}

/* ---- linear over a stack of weights (gate+up, q/k/v shapes): one GEMM each way ---- */

void check_linear_stack(void) {
    if (!gpu()) return;
    gpu_rng r = {26};
    /* n, cols, rows of each stacked weight (0 = absent) */
    const int64_t shapes[][5] = {{7, 64, 96, 96, 0}, {300, 896, 4864, 4864, 0}, {33, 128, 128, 32, 32},
                                 {1, 896, 896, 128, 128}};
    for (int s = 0; s < 4; s++) {
        int64_t n = shapes[s][0], cols = shapes[s][1], rows[3], total = 0;
        int k = 0;
        for (int i = 0; i < 3; i++)
            if (shapes[s][2 + i]) rows[k++] = shapes[s][2 + i], total += shapes[s][2 + i];
        for (int nf4 = 0; nf4 <= 1; nf4++) {
            char sh[96];
            snprintf(sh, sizeof sh, "N%lld in%lld k%d out%lld %s", (long long)n, (long long)cols, k, (long long)total,
                     nf4 ? "NF4" : "bf16");
            float *x = hrand(&r, n * cols, 1.0f), *dy = hrand(&r, n * total, 1.0f), *w[3];
            qlt_weight wt[3];
            const qlt_weight *wp[3];
            if (group_weights(&r, wt, wp, w, rows, k, cols, nf4) != 0) return;
            if (G->weight_stack_prepare(G, wp, k, 0) != 0) {
                gpu_check_fail("weight_stack_prepare", qlt_error());
                return;
            }
            float *y_ref = malloc(sizeof(float) * (size_t)(n * total)), *dx_ref = malloc(sizeof(float) * (size_t)(n * cols));
            int64_t col = 0;
            for (int i = 0; i < k; i++) {
                qlt_cpu_gemm(0, 1, n, rows[i], cols, 1.0f, x, cols, w[i], cols, 0.0f, y_ref + col, total);
                qlt_cpu_gemm(0, 0, n, cols, rows[i], 1.0f, dy + col, total, w[i], cols, i ? 1.0f : 0.0f, dx_ref, cols);
                col += rows[i];
            }
            void *dxp = dbf16(x, n * cols), *y = dpoison(2 * (size_t)(n * total)), *ddx = dpoison(2 * (size_t)(n * cols));
            G->linear_fwd(G, y, dxp, wp, k, NULL, n);
            G->linear_bwd_x(G, ddx, dbf16(dy, n * total), wp, k, n, 0.0f);
            float *gy = hget_bf16(y, n * total), *gdx = hget_bf16(ddx, n * cols);
            row("linear_fwd stack", sh, gy, y_ref, n * total, 1e-2);
            row("linear_bwd_x stack", sh, gdx, dx_ref, n * cols, 1e-2);
            for (int i = 0; i < k; i++) G->weight_free(G, &wt[i]), free(w[i]);
            dfree_all();
            free(x), free(dy), free(y_ref), free(dx_ref), free(gy), free(gdx);
        }
    }
}

/* ---- generation: the NF4 GEMV (linear_fwd on at most QLT_NF4_GEMV_MAX_TOKENS tokens) and attention over a
 * KV cache, against the CPU reference on the same bf16 inputs and NF4 round-tripped weights ---- */

void check_generation(void) {
    if (!gpu()) return;
    gpu_rng r = {31};
    /* rows, cols, blocksize, double quant, bias */
    const int64_t shapes[][5] = {{96, 64, 64, 1, 0}, {1536, 1536, 64, 1, 1}, {4864, 896, 128, 0, 0},
                                 {896, 4864, 64, 0, 1}, {200, 352, 32, 1, 0}};
    for (int s = 0; s < 5; s++) {
        const int64_t rows = shapes[s][0], cols = shapes[s][1];
        const int bs = (int)shapes[s][2], dq = (int)shapes[s][3], with_bias = (int)shapes[s][4];
        float *w = hrand(&r, rows * cols, 0.05f), *bias = hrand_f32(&r, rows, 0.5f);
        qlt_weight wt;
        if (G->weight_create(G, &wt, w, QLT_DTYPE_F32, rows, cols, bs, dq) != 0) {
            gpu_check_fail("weight_create", qlt_error());
            return;
        }
        /* the reference multiplies the same NF4 bytes dequantized on the CPU */
        qlt_backend *cpu = qlt_backend_cpu_create(1, 1);
        qlt_weight cw;
        if (cpu->weight_create(cpu, &cw, w, QLT_DTYPE_F32, rows, cols, bs, dq) != 0) {
            gpu_check_fail("weight_create cpu", qlt_error());
            return;
        }
        qlt_nf4_dequantize_f32(&cw.nf4, w);
        cpu->weight_free(cpu, &cw);
        cpu->destroy(cpu);
        for (int i = 0; i < rows * cols; i++) w[i] = bfr(w[i]);
        float *db = with_bias ? df32(bias, rows) : NULL;
        for (int64_t n = 1; n <= 4; n++) {
            char sh[96];
            snprintf(sh, sizeof sh, "N%lld out%lld in%lld bs%d%s%s", (long long)n, (long long)rows, (long long)cols, bs,
                     dq ? " dq" : "", with_bias ? " +bias" : "");
            float *x = hrand(&r, n * cols, 1.0f), *ref = malloc(sizeof(float) * (size_t)(n * rows));
            qlt_cpu_gemm(0, 1, n, rows, cols, 1.0f, x, cols, w, cols, 0.0f, ref, rows);
            if (with_bias)
                for (int64_t t = 0; t < n; t++)
                    for (int64_t o = 0; o < rows; o++) ref[t * rows + o] += bias[o];
            void *y = dpoison(2 * (size_t)(n * rows));
            const qlt_weight *wp = &wt;
            G->linear_fwd(G, y, dbf16(x, n * cols), &wp, 1, db, n);
            float *got = hget_bf16(y, n * rows);
            row("nf4_gemv", sh, got, ref, n * rows, 1e-2);
            free(x), free(ref), free(got);
        }
        G->weight_free(G, &wt);
        free(w), free(bias);
        dfree_all();
    }
    /* a stack of two weights in one launch (gate and up): rows 200 and 96, side by side in y */
    {
        const int64_t r0 = 200, r1 = 96, cols = 352;
        float *w = hrand(&r, (r0 + r1) * cols, 0.05f);
        qlt_weight wt[2];
        const qlt_weight *wp[2] = {&wt[0], &wt[1]};
        if (G->weight_create(G, &wt[0], w, QLT_DTYPE_F32, r0, cols, 64, 1) != 0 ||
            G->weight_create(G, &wt[1], w + r0 * cols, QLT_DTYPE_F32, r1, cols, 64, 1) != 0) {
            gpu_check_fail("weight_create", qlt_error());
            return;
        }
        if (nf4_reference(w, r0, cols) != 0 || nf4_reference(w + r0 * cols, r1, cols) != 0) return;
        for (int64_t i = 0; i < (r0 + r1) * cols; i++) w[i] = bfr(w[i]);
        for (int64_t n = 1; n <= 4; n++) {
            char sh[96];
            snprintf(sh, sizeof sh, "N%lld stack out%lld+%lld in%lld", (long long)n, (long long)r0, (long long)r1,
                     (long long)cols);
            float *x = hrand(&r, n * cols, 1.0f), *ref = malloc(sizeof(float) * (size_t)(n * (r0 + r1)));
            qlt_cpu_gemm(0, 1, n, r0 + r1, cols, 1.0f, x, cols, w, cols, 0.0f, ref, r0 + r1);
            void *y = dpoison(2 * (size_t)(n * (r0 + r1)));
            G->linear_fwd(G, y, dbf16(x, n * cols), wp, 2, NULL, n);
            float *got = hget_bf16(y, n * (r0 + r1));
            row("nf4_gemv", sh, got, ref, n * (r0 + r1), 1e-2);
            free(x), free(ref), free(got);
        }
        G->weight_free(G, &wt[0]);
        G->weight_free(G, &wt[1]);
        free(w);
        dfree_all();
    }
    /* past, n, heads, kv heads, head dim: prompts (n > 1), single steps over short and long caches (the keys
     * split over CTAs and combined), GQA and not */
    const int64_t cases[][5] = {{0, 7, 4, 2, 64}, {100, 1, 28, 4, 128}, {3000, 1, 14, 2, 64}, {37, 3, 8, 8, 32},
                                {500, 1, 9, 3, 64}, {1, 1, 4, 1, 16}, {0, 130, 6, 2, 96}};
    for (int c = 0; c < 7; c++) {
        const int64_t past = cases[c][0], n = cases[c][1], keys = past + n;
        const int heads = (int)cases[c][2], kv = (int)cases[c][3], hd = (int)cases[c][4];
        const float scale = 1.0f / sqrtf((float)hd);
        char sh[96];
        snprintf(sh, sizeof sh, "past%lld N%lld H%d/%d hd%d", (long long)past, (long long)n, heads, kv, hd);
        float *q = hrand(&r, n * heads * hd, 1.0f), *k = hrand(&r, keys * kv * hd, 1.0f),
              *v = hrand(&r, keys * kv * hd, 1.0f), *ref = malloc(sizeof(float) * (size_t)(n * heads * hd));
        qlt_cpu_attention_decode(ref, q, k, v, past, n, heads, kv, hd, scale, 0);
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)(past + i);
        const int32_t *dpos = di32(pos, n);
        /* the launch sized for the keys (as eager steps are) and for a cache of 2.5x as many (a replayed step) */
        for (int bound = 0; bound < 2; bound++) {
            const int64_t max_keys = bound ? keys + 3 * keys / 2 : keys;
            char shb[128];
            snprintf(shb, sizeof shb, "%s max_keys%lld", sh, (long long)max_keys);
            void *out = dpoison(2 * (size_t)(n * heads * hd));
            G->attention_decode(G, out, dbf16(q, n * heads * hd), dbf16(k, keys * kv * hd), dbf16(v, keys * kv * hd),
                                dpos, max_keys, n, heads, kv, hd, scale, 0);
            float *got = hget_bf16(out, n * heads * hd);
            row("attention_decode", shb, got, ref, n * heads * hd, 1e-2);
            free(got);
        }
        /* kv_store: the n new rows into a cache of `keys` rows at their positions, the rest untouched */
        {
            const int64_t width = (int64_t)kv * hd;
            float *newk = hrand(&r, n * width, 1.0f), *newv = hrand(&r, n * width, 1.0f);
            float *expect_k = malloc(sizeof(float) * (size_t)(keys * width));
            float *expect_v = malloc(sizeof(float) * (size_t)(keys * width));
            for (int64_t e = 0; e < keys * width; e++) expect_k[e] = bfr(k[e]), expect_v[e] = bfr(v[e]);
            for (int64_t i = 0; i < n; i++)
                for (int64_t e = 0; e < width; e++) {
                    expect_k[(past + i) * width + e] = bfr(newk[i * width + e]);
                    expect_v[(past + i) * width + e] = bfr(newv[i * width + e]);
                }
            void *kc = dbf16(k, keys * width), *vc = dbf16(v, keys * width);
            G->kv_store(G, kc, vc, dbf16(newk, n * width), dbf16(newv, n * width), dpos, n, width);
            float *gk = hget_bf16(kc, keys * width), *gv = hget_bf16(vc, keys * width);
            row("kv_store k", sh, gk, expect_k, keys * width, 0.0);
            row("kv_store v", sh, gv, expect_v, keys * width, 0.0);
            free(newk), free(newv), free(expect_k), free(expect_v), free(gk), free(gv);
        }
        free(q), free(k), free(v), free(ref), free(pos);
        dfree_all();
    }
}

/* ---- LoRA: a group of k sites reading one input (k = 1, q/k/v, gate/up stacked in one output) ---- */

void check_lora(void) {
    if (!gpu()) return;
    gpu_rng r = {16};
    /* n, in, r, stacked (sites share one output row), outs of up to three sites */
    const int64_t shapes[][7] = {{7, 96, 8, 0, 64, 0, 0},          {300, 896, 16, 0, 128, 0, 0},
                                 {1, 64, 4, 0, 96, 0, 0},          {513, 896, 64, 0, 4864, 0, 0},
                                 {300, 896, 16, 0, 896, 128, 128}, {77, 896, 16, 1, 4864, 4864, 0},
                                 {5, 64, 8, 1, 40, 24, 8},         {1100, 256, 16, 0, 256, 64, 64},
                                 {600, 128, 32, 1, 520, 512, 0},   {40, 96, 12, 0, 64, 0, 0}};
    const float scale = 2.0f;
    for (int s = 0; s < 10; s++) {
        int64_t n = shapes[s][0], in = shapes[s][1], outs[3], total = 0;
        int rk = (int)shapes[s][2], stacked = (int)shapes[s][3], k = 0;
        for (int i = 0; i < 3; i++)
            if (shapes[s][4 + i]) outs[k++] = shapes[s][4 + i], total += shapes[s][4 + i];
        char sh[96];
        snprintf(sh, sizeof sh, "N%lld in%lld k%d%s out%lld r%d", (long long)n, (long long)in, k,
                 stacked ? " stacked" : "", (long long)total, rk);
        float *x = hrand(&r, n * in, 1.0f), *a[3], *b[3], *y0[3], *dyv[3], *ga0[3], *gb0[3];
        qlt_lora_site cs[3], gs[3]; /* CPU (host) and GPU (device) sites */
        void *ybuf = NULL, *dybuf = NULL;
        float *y0s = NULL, *dys = NULL;
        if (stacked) { /* one [n, total] output and gradient, each site its columns */
            y0s = hrand(&r, n * total, 1.0f), dys = hrand(&r, n * total, 1.0f);
            ybuf = dbf16(y0s, n * total), dybuf = dbf16(dys, n * total);
        }
        int64_t col = 0;
        for (int i = 0; i < k; i++) {
            a[i] = hrand_f32(&r, rk * in, 0.1f), b[i] = hrand_f32(&r, outs[i] * rk, 0.1f);
            ga0[i] = hrand_f32(&r, rk * in, 0.01f), gb0[i] = hrand_f32(&r, outs[i] * rk, 0.01f);
            int64_t ld = stacked ? total : outs[i];
            if (stacked) y0[i] = NULL, dyv[i] = NULL;
            else y0[i] = hrand(&r, n * outs[i], 1.0f), dyv[i] = hrand(&r, n * outs[i], 1.0f);
            cs[i] = (qlt_lora_site){stacked ? NULL : hcopy(y0[i], n * outs[i]), stacked ? NULL : dyv[i], ld, outs[i],
                                    a[i], b[i], NULL, NULL};
            gs[i] = (qlt_lora_site){stacked ? (char *)ybuf + 2 * col : dbf16(y0[i], n * outs[i]),
                                    stacked ? (char *)dybuf + 2 * col : dbf16(dyv[i], n * outs[i]), ld, outs[i],
                                    df32(a[i], rk * in), df32(b[i], outs[i] * rk), NULL, NULL};
            if (stacked) {
                cs[i].y = NULL; /* set below to the shared host copy */
                cs[i].dy = dys + col;
            }
            col += outs[i];
        }
        float *yhost = stacked ? hcopy(y0s, n * total) : NULL;
        col = 0;
        for (int i = 0; i < k; i++) {
            if (stacked) cs[i].y = yhost + col;
            col += outs[i];
        }
        /* forward */
        float *u_ref = malloc(sizeof(float) * (size_t)(n * k * rk));
        qlt_cpu_lora_fwd(cs, k, u_ref, x, n, in, rk, scale);
        void *dxin = dbf16(x, n * in);
        float *du = dpoison(4 * (size_t)(n * k * rk));
        G->lora_fwd(G, gs, k, du, dxin, n, in, rk, scale);
        float *u = hget_f32(du, n * k * rk);
        row("lora_fwd u (fp32)", sh, u, u_ref, n * k * rk, 1e-4);
        if (stacked) {
            float *y = hget_bf16(ybuf, n * total);
            row("lora_fwd y += (bf16)", sh, y, yhost, n * total, 1e-2);
            free(y);
        } else {
            for (int i = 0; i < k; i++) {
                float *y = hget_bf16(gs[i].y, n * outs[i]);
                char name[64];
                snprintf(name, sizeof name, "lora_fwd y%d += (bf16)", i);
                row(name, sh, y, cs[i].y, n * outs[i], 1e-2);
                free(y);
            }
        }
        /* backward: dx with beta 0 / 1 and without dx; parameter grads accumulate onto non-zero values; du
         * and dB by the one-pass kernel (where the shape fits it), by cuBLAS, and by the one-pass kernel one
         * token block a launch */
        float *dx0 = hrand(&r, n * in, 1.0f);
        for (int variant = 0; variant < 5; variant++) { /* 0: dx beta 0, 1: dx beta 1, 2: dx NULL, 3, 4: as 0 */
            const int mode = variant == 3 ? 0 : variant == 4 ? 2 : 1;
            qlt_cuda_set_lora_dudb(G, mode);
            float beta = variant == 1 ? 1.0f : 0.0f;
            float *ga_ref[3], *gb_ref[3], *dx_ref = hcopy(dx0, n * in);
            for (int i = 0; i < k; i++) {
                ga_ref[i] = hcopy(ga0[i], rk * in), gb_ref[i] = hcopy(gb0[i], outs[i] * rk);
                cs[i].da = ga_ref[i], cs[i].db = gb_ref[i];
                gs[i].da = df32(ga0[i], rk * in), gs[i].db = df32(gb0[i], outs[i] * rk);
            }
            float *du_ref = malloc(sizeof(float) * (size_t)(n * k * rk));
            qlt_cpu_lora_bwd(cs, k, du_ref, u_ref, x, variant == 2 ? NULL : dx_ref, beta, n, in, rk, scale);
            float *scr = dpoison(4 * (size_t)(n * k * rk));
            void *ddx = variant == 2 ? NULL : variant == 1 ? dbf16(dx0, n * in) : dpoison(2 * (size_t)(n * in));
            G->lora_bwd(G, gs, k, scr, df32(u_ref, n * k * rk), dxin, ddx, beta, n, in, rk, scale);
            qlt_cuda_set_lora_dudb(G, 1);
            const char *v = variant == 0   ? " (dx beta0)"
                            : variant == 1 ? " (dx beta1)"
                            : variant == 2 ? " (no dx)"
                            : variant == 3 ? " (dx beta0, du/dB by cuBLAS)"
                                           : " (dx beta0, du/dB a token block a launch)";
            char name[96];
            for (int i = 0; i < k; i++) {
                float *ga = hget_f32(gs[i].da, rk * in), *gb = hget_f32(gs[i].db, outs[i] * rk);
                snprintf(name, sizeof name, "lora_bwd dA%d%s", i, v);
                row(name, sh, ga, ga_ref[i], rk * in, 1e-4);
                snprintf(name, sizeof name, "lora_bwd dB%d%s", i, v);
                row(name, sh, gb, gb_ref[i], outs[i] * rk, 1e-4);
                free(ga), free(gb), free(ga_ref[i]), free(gb_ref[i]);
            }
            if (ddx) {
                float *dxg = hget_bf16(ddx, n * in);
                snprintf(name, sizeof name, "lora_bwd dx%s", v);
                row(name, sh, dxg, dx_ref, n * in, 1e-2);
                free(dxg);
            }
            free(dx_ref), free(du_ref);
        }
        dfree_all();
        for (int i = 0; i < k; i++) {
            free(a[i]), free(b[i]), free(ga0[i]), free(gb0[i]);
            if (!stacked) free(y0[i]), free(dyv[i]), free(cs[i].y);
        }
        free(x), free(u_ref), free(u), free(dx0), free(y0s), free(dys), free(yhost);
    }
}

/* ---- a linear group with its adapters in one op: the forward (linear_lora_fwd: gate+up folded into the
 * stack's GEMM, every other group's adapters written first and the frozen GEMMs added onto them) and the
 * backward (linear_lora_bwd: narrow outputs and the adapters in one GEMM, the wide outputs' GEMMs after it) ----
 * Both against the CPU's linear ops followed by lora_fwd / lora_bwd. */

static void check_linear_lora_bwd(gpu_rng *r);

void check_linear_lora(void) {
    if (!gpu()) return;
    gpu_rng r = {27};
    /* n, in, r, stacked, with bias (non-stacked only), outs: gate/up-like stacks (folded when in * 4 <= sum outs),
     * q/k/v-like groups with and without biases, and o / down-like single projections */
    const int64_t shapes[][8] = {{77, 896, 16, 1, 0, 4864, 4864, 0},   {300, 64, 8, 1, 0, 40, 24, 16},
                                 {1, 128, 4, 1, 0, 96, 96, 0},         {513, 1536, 64, 1, 0, 8960, 8960, 0},
                                 {77, 256, 8, 0, 1, 256, 64, 64},      {300, 512, 16, 0, 0, 512, 128, 128},
                                 {513, 896, 16, 0, 1, 896, 128, 128},  {129, 896, 16, 1, 0, 896, 0, 0},
                                 {64, 1024, 8, 1, 0, 256, 0, 0}};
    const float scale = 2.0f;
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        const int64_t n = shapes[s][0], in = shapes[s][1];
        const int rk = (int)shapes[s][2], stacked = (int)shapes[s][3], with_bias = (int)shapes[s][4];
        int64_t outs[3], total = 0;
        int k = 0;
        for (int i = 0; i < 3; i++)
            if (shapes[s][5 + i]) outs[k++] = shapes[s][5 + i], total += shapes[s][5 + i];
        for (int nf4 = 0; nf4 <= 1; nf4++) {
            char sh[128];
            snprintf(sh, sizeof sh, "N%lld in%lld k%d out%lld r%d %s%s%s", (long long)n, (long long)in, k,
                     (long long)total, rk, nf4 ? "NF4" : "bf16", stacked ? (in * 4 <= total && k > 1 ? " folded" : " stack")
                                                                        : " own outputs",
                     with_bias ? " bias" : "");
            float *x = hrand(&r, n * in, 1.0f), *w[3], *a[3], *b[3], *bias[3] = {NULL, NULL, NULL};
            const float *dbias[3] = {NULL, NULL, NULL};
            qlt_weight wt[3];
            const qlt_weight *wp[3];
            qlt_lora_site cs[3], gs[3];
            if (group_weights(&r, wt, wp, w, outs, k, in, nf4) != 0) return;
            float *y_ref = calloc((size_t)(n * total), sizeof(float));
            void *y = stacked ? dpoison(2 * (size_t)(n * total)) : NULL;
            int64_t col = 0;
            for (int i = 0; i < k; i++) {
                a[i] = hrand_f32(&r, rk * in, 0.1f), b[i] = hrand_f32(&r, outs[i] * rk, 0.1f);
                qlt_cpu_gemm(0, 1, n, outs[i], in, 1.0f, x, in, w[i], in, 0.0f, y_ref + col, total);
                if (with_bias) {
                    bias[i] = hrand_f32(&r, outs[i], 0.5f);
                    for (int64_t t = 0; t < n; t++)
                        for (int64_t o = 0; o < outs[i]; o++) y_ref[t * total + col + o] += bias[i][o];
                    dbias[i] = df32(bias[i], outs[i]);
                    if (G->bias_prepare(G, dbias[i], outs[i]) != 0) gpu_check_fail("bias_prepare", qlt_error());
                }
                cs[i] = (qlt_lora_site){y_ref + col, NULL, total, outs[i], a[i], b[i], NULL, NULL};
                void *yi = stacked ? (char *)y + 2 * col : dpoison(2 * (size_t)(n * outs[i]));
                gs[i] = (qlt_lora_site){yi, NULL, stacked ? total : outs[i], outs[i], df32(a[i], rk * in),
                                        df32(b[i], outs[i] * rk), NULL, NULL};
                col += outs[i];
            }
            if (G->weight_stack_prepare(G, wp, k, stacked ? 3 * (int64_t)k * rk : 0) != 0 ||
                G->lora_group_prepare(G, k, in, outs, rk) != 0) {
                gpu_check_fail("weight_stack_prepare / lora_group_prepare", qlt_error());
                return;
            }
            float *u_ref = malloc(sizeof(float) * (size_t)(n * k * rk));
            qlt_cpu_lora_fwd(cs, k, u_ref, x, n, in, rk, scale);
            float *du = dpoison(4 * (size_t)(n * k * rk));
            G->linear_lora_fwd(G, y, du, dbf16(x, n * in), wp, k, stacked ? NULL : dbias, gs, n, rk, scale);
            float *gy = malloc(sizeof(float) * (size_t)(n * total)), *gu = hget_f32(du, n * k * rk);
            col = 0;
            for (int i = 0; i < k; i++) { /* every output gathered as [n, total] */
                float *gi = hget_bf16(gs[i].y, (n - 1) * gs[i].ld + outs[i]);
                for (int64_t t = 0; t < n; t++) memcpy(gy + t * total + col, gi + t * gs[i].ld, sizeof(float) * (size_t)outs[i]);
                free(gi);
                col += outs[i];
            }
            row("linear_lora_fwd y", sh, gy, y_ref, n * total, 1e-2);
            row("linear_lora_fwd u (fp32)", sh, gu, u_ref, n * k * rk, 1e-4);
            for (int i = 0; i < k; i++) G->weight_free(G, &wt[i]), free(w[i]), free(a[i]), free(b[i]), free(bias[i]);
            dfree_all();
            free(x), free(y_ref), free(u_ref), free(gy), free(gu);
        }
    }
    check_linear_lora_bwd(&r);
}

/* the group's backward (linear_lora_bwd) against the CPU's dx = beta dx + sum dy_i W_i followed by lora_bwd */
static void check_linear_lora_bwd(gpu_rng *r) {
    /* n, in, r, stacked, outs: single projections (folded when out * 4 <= in, as the down projection), q/k/v-like
     * groups (k and v folded, q added after) and a gate/up-like stack (one GEMM over its gradient) */
    const int64_t shapes[][7] = {{300, 512, 8, 1, 64, 0, 0},    {513, 8960, 16, 1, 1536, 0, 0}, {77, 64, 4, 1, 96, 0, 0},
                                 {1, 256, 16, 1, 32, 0, 0},      {300, 512, 8, 0, 512, 64, 64},  {77, 256, 16, 0, 256, 128, 32},
                                 {129, 128, 8, 1, 384, 384, 0}};
    const float scale = 2.0f;
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        const int64_t n = shapes[s][0], in = shapes[s][1];
        const int rk = (int)shapes[s][2], stacked = (int)shapes[s][3];
        int64_t outs[3], total = 0;
        int k = 0, folded = 0;
        for (int i = 0; i < 3; i++)
            if (shapes[s][4 + i]) outs[k++] = shapes[s][4 + i], total += shapes[s][4 + i];
        for (int i = 0; i < k; i++) folded += (!stacked || k == 1) && outs[i] * 4 <= in;
        /* variant bits 0: NF4 weights, 1: dx beta 1; 2, 3: the fp16 / fp32 backward GEMMs (a folded single
         * projection, the q/k/v-like group and the stack, NF4, beta 1: nothing folds into their adapters' GEMM,
         * and their conversion workspace also carries the adapters' T3) */
        const int precisions = s == 0 || s == 4 || s == 6;
        for (int variant = 0; variant < (precisions ? 12 : 4); variant++) {
            if (variant >= 4 && (variant & 3) != 3) continue;
            const int nf4 = variant & 1;
            const float beta = (variant & 2) ? 1.0f : 0.0f;
            const qlt_backward_a mode = variant >= 8 ? QLT_BACKWARD_A_FP32 : variant >= 4 ? QLT_BACKWARD_A_FP16 : QLT_BACKWARD_A_BF16;
            char sh[128];
            snprintf(sh, sizeof sh, "N%lld in%lld k%d out%lld r%d %s beta%d%s, %d folded%s", (long long)n, (long long)in,
                     k, (long long)total, rk, nf4 ? "NF4" : "bf16", (int)beta, stacked && k > 1 ? " stack" : "",
                     mode == QLT_BACKWARD_A_BF16 ? folded : 0,
                     mode == QLT_BACKWARD_A_FP16 ? ", fp16 GEMMs" : mode == QLT_BACKWARD_A_FP32 ? ", fp32 GEMMs" : "");
            float *w[3], *a[3], *b[3], *ga[3], *gb[3], *ga_ref[3], *gb_ref[3];
            qlt_weight wt[3];
            const qlt_weight *wp[3];
            if (group_weights(r, wt, wp, w, outs, k, in, nf4) != 0) return;
            float *x = hrand(r, n * in, 1.0f), *dy = hrand(r, n * total, 1.0f), *u = hrand_f32(r, n * k * rk, 1.0f);
            float *dx0 = hrand(r, n * in, 1.0f), *dx_ref = hcopy(dx0, n * in);
            float *du_ref = malloc(sizeof(float) * (size_t)(n * k * rk));
            qlt_lora_site cs[3], gs[3];
            void *ddy = stacked ? dbf16(dy, n * total) : NULL;
            int64_t col = 0;
            for (int i = 0; i < k; i++) {
                a[i] = hrand_f32(r, rk * in, 0.1f), b[i] = hrand_f32(r, outs[i] * rk, 0.1f);
                ga[i] = hrand_f32(r, rk * in, 0.01f), gb[i] = hrand_f32(r, outs[i] * rk, 0.01f);
                ga_ref[i] = hcopy(ga[i], rk * in), gb_ref[i] = hcopy(gb[i], outs[i] * rk);
                qlt_cpu_gemm(0, 0, n, in, outs[i], 1.0f, dy + col, total, w[i], in, i == 0 ? beta : 1.0f, dx_ref, in);
                cs[i] = (qlt_lora_site){NULL, dy + col, total, outs[i], a[i], b[i], ga_ref[i], gb_ref[i]};
                const void *dyi;
                if (stacked) {
                    dyi = (const char *)ddy + 2 * col;
                } else { /* its own [n, out_i] gradient */
                    float *own = malloc(sizeof(float) * (size_t)(n * outs[i]));
                    for (int64_t t = 0; t < n; t++) memcpy(own + t * outs[i], dy + t * total + col, sizeof(float) * (size_t)outs[i]);
                    dyi = dbf16(own, n * outs[i]);
                    free(own);
                }
                gs[i] = (qlt_lora_site){NULL, dyi, stacked ? total : outs[i], outs[i], df32(a[i], rk * in),
                                        df32(b[i], outs[i] * rk), df32(ga[i], rk * in), df32(gb[i], outs[i] * rk)};
                col += outs[i];
            }
            qlt_cpu_lora_bwd(cs, k, du_ref, u, x, dx_ref, 1.0f, n, in, rk, scale);
            if (G->weight_stack_prepare(G, wp, k, 0) != 0 || G->lora_group_prepare(G, k, in, outs, rk) != 0) {
                gpu_check_fail("weight_stack_prepare / lora_group_prepare", qlt_error());
                return;
            }
            void *ddx = beta != 0.0f ? dbf16(dx0, n * in) : dpoison(2 * (size_t)(n * in));
            float *scr = dpoison(4 * (size_t)(n * k * rk));
            G->backward_a = mode;
            G->linear_lora_bwd(G, ddx, beta, wp, k, stacked, gs, scr, df32(u, n * k * rk), dbf16(x, n * in), n, rk, scale);
            G->backward_a = QLT_BACKWARD_A_BF16;
            float *gdx = hget_bf16(ddx, n * in), *gdu = hget_f32(scr, n * k * rk);
            row("linear_lora_bwd dx", sh, gdx, dx_ref, n * in, 1e-2);
            row("linear_lora_bwd du (fp32)", sh, gdu, du_ref, n * k * rk, 1e-4);
            for (int i = 0; i < k; i++) {
                float *gga = hget_f32(gs[i].da, rk * in), *ggb = hget_f32(gs[i].db, outs[i] * rk);
                row("linear_lora_bwd dA", sh, gga, ga_ref[i], rk * in, 1e-4);
                row("linear_lora_bwd dB", sh, ggb, gb_ref[i], outs[i] * rk, 1e-4);
                free(gga), free(ggb);
                G->weight_free(G, &wt[i]);
                free(w[i]), free(a[i]), free(b[i]), free(ga[i]), free(gb[i]), free(ga_ref[i]), free(gb_ref[i]);
            }
            dfree_all();
            free(x), free(dy), free(u), free(dx0), free(dx_ref), free(du_ref), free(gdx), free(gdu);
        }
    }
}

/* ---- attention ---- */

typedef struct attn_case {
    int batch, seq, heads, kv, hd, max_seg; /* max_seg 0: one example per row */
} attn_case;

static const attn_case attn_cases[] = {
    {1, 1, 4, 2, 16, 0},   {2, 17, 4, 2, 32, 5},   {1, 128, 14, 2, 64, 0}, {2, 128, 4, 2, 16, 40},
    {1, 300, 8, 8, 128, 0}, {2, 512, 4, 2, 128, 150}, {1, 512, 14, 2, 64, 100}, {3, 77, 8, 8, 32, 30},
    {1, 45, 4, 1, 128, 0},  {2, 700, 6, 2, 64, 200},  {1, 1000, 2, 2, 128, 0},
    /* head_dim 128 edges: two tokens (with one, dQ and dK are 0 up to rounding and the
     * relative error is meaningless); a row just past a tile, GQA 2, packed */
    {1, 2, 4, 2, 128, 0},   {3, 65, 6, 3, 128, 20},
};

void check_attention(void) {
    if (!gpu()) return;
    gpu_rng r = {17};
    for (size_t c = 0; c < sizeof attn_cases / sizeof attn_cases[0]; c++) {
        const attn_case *A = &attn_cases[c];
        int64_t n = (int64_t)A->batch * A->seq, qn = n * A->heads * A->hd, kn = n * A->kv * A->hd;
        float scale = 1.0f / sqrtf((float)A->hd);
        char sh[64];
        snprintf(sh, sizeof sh, "B%d S%d H%d/%d hd%d%s", A->batch, A->seq, A->heads, A->kv, A->hd,
                 A->max_seg ? " packed" : "");
        int32_t *seg = malloc(sizeof(int32_t) * (size_t)n);
        make_segments(seg, &r, A->batch, A->seq, A->max_seg ? A->max_seg : A->seq);
        if (!A->max_seg)
            for (int64_t i = 0; i < n; i++) seg[i] = 0;
        float *q = hrand(&r, qn, 1.0f), *k = hrand(&r, kn, 1.0f), *v = hrand(&r, kn, 1.0f), *dout = hrand(&r, qn, 1.0f);
        float *o_ref = malloc(sizeof(float) * (size_t)qn), *lse_ref = malloc(sizeof(float) * (size_t)(n * A->heads));
        qlt_cpu_attention_fwd(o_ref, lse_ref, q, k, v, seg, A->batch, A->seq, A->heads, A->kv, A->hd, scale);
        void *dq_ = dbf16(q, qn), *dk_ = dbf16(k, kn), *dv_ = dbf16(v, kn);
        int32_t *dseg = di32(seg, n);
        /* backward on the reference forward's outputs (out rounded to bf16 for both sides) */
        float *o_bf = malloc(sizeof(float) * (size_t)qn);
        for (int64_t i = 0; i < qn; i++) o_bf[i] = bfr(o_ref[i]);
        float *dq_ref = malloc(sizeof(float) * (size_t)qn), *dk_ref = malloc(sizeof(float) * (size_t)kn),
              *dv_ref = malloc(sizeof(float) * (size_t)kn), *scr = malloc(sizeof(float) * (size_t)(n * A->heads));
        qlt_cpu_attention_bwd(dq_ref, dk_ref, dv_ref, scr, dout, o_bf, lse_ref, q, k, v, seg, A->batch, A->seq, A->heads,
                              A->kv, A->hd, scale);
        void *ddout = dbf16(dout, qn), *dout_ref = dbf16(o_bf, qn);
        /* lse as the own kernels keep it, [N, H], and as cuDNN's does, [B, H, S] */
        float *lse_bhs = malloc(sizeof(float) * (size_t)(n * A->heads));
        for (int b = 0; b < A->batch; b++)
            for (int t = 0; t < A->seq; t++)
                for (int h = 0; h < A->heads; h++)
                    lse_bhs[((int64_t)b * A->heads + h) * A->seq + t] = lse_ref[((int64_t)b * A->seq + t) * A->heads + h];
        float *dlse_ref[2] = {df32(lse_ref, n * A->heads), df32(lse_bhs, n * A->heads)};
        /* the own kernels (via 0), then cuDNN's fused attention where it is loaded and takes the shape: with
         * max_row_examples as the data gives it (1: dense; more: ragged, an example a sequence), and for one
         * example a row also ragged with 2 slots a row (one left empty) */
        const int most = max_row_segments(seg, A->batch, A->seq);
        for (int det = 0; det <= 1; det++) {
            for (int via = 0; via <= (most == 1 ? 2 : 1); via++) {
                G->deterministic = det;
                G->max_row_examples = via == 0 ? 0 : via == 1 ? most : 2;
                const int kind = via ? G->attention_plan(G, A->batch, A->seq, A->heads, A->kv, A->hd, scale) : 0;
                if (via && !kind) continue;
                char shv[96];
                snprintf(shv, sizeof shv, "%s%s%s", sh, kind == 1 ? " cudnn" : kind == 2 ? " cudnn ragged" : "",
                         det ? " deterministic" : "");
                void *dout_ = dpoison(2 * (size_t)qn);
                float *dlse = dpoison(4 * (size_t)(n * A->heads));
                G->attention_fwd(G, dout_, dlse, dq_, dk_, dv_, dseg, A->batch, A->seq, A->heads, A->kv, A->hd, scale);
                if (!det) { /* the forward does not depend on det */
                    float *o = hget_bf16(dout_, qn), *l = hget_f32(dlse, n * A->heads);
                    row("attention_fwd out", shv, o, o_ref, qn, 1e-2);
                    row("attention_fwd lse", shv, l, kind == 1 ? lse_bhs : lse_ref, n * A->heads, 1e-4);
                    free(o), free(l);
                }
                /* the backward on the reference forward's outputs: the own one-pass kernel (atomic dQ; head_dim 64
                 * and 128) or cuDNN's, and with det the deterministic ones */
                void *gq = dpoison(2 * (size_t)qn), *gk = dpoison(2 * (size_t)kn), *gv = dpoison(2 * (size_t)kn);
                float *gscr = dpoison(G->attention_bwd_scratch_bytes(G, n, A->heads, A->kv, A->hd));
                G->attention_bwd(G, gq, gk, gv, gscr, ddout, dout_ref, dlse_ref[kind == 1], dq_, dk_, dv_, dseg, A->batch,
                                 A->seq, A->heads, A->kv, A->hd, scale);
                float *hq = hget_bf16(gq, qn), *hk = hget_bf16(gk, kn), *hv = hget_bf16(gv, kn);
                row("attention_bwd dq", shv, hq, dq_ref, qn, 2e-2);
                row("attention_bwd dk", shv, hk, dk_ref, kn, 2e-2);
                row("attention_bwd dv", shv, hv, dv_ref, kn, 2e-2);
                if (!kind) { /* D = rowsum(dO O) is the own kernels' (cuDNN's workspace is its own) */
                    float *hs = hget_f32(gscr, n * A->heads);
                    row("attention_bwd D", shv, hs, scr, n * A->heads, 1e-4);
                    free(hs);
                }
                free(hq), free(hk), free(hv);
            }
        }
        G->max_row_examples = 0;
        free(o_bf), free(lse_bhs);
        G->deterministic = 0;
        dfree_all();
        free(seg), free(q), free(k), free(v), free(dout), free(o_ref), free(lse_ref);
        free(dq_ref), free(dk_ref), free(dv_ref), free(scr);
    }
}

/* ---- lm_head + cross-entropy, logits ---- */

/* The CUDA op's reference (Hugging Face's bf16 semantics): logits = bf16(x W^T) from the CPU GEMM,
 * lse and softmax in double from those, dlogits = bf16(gs (softmax - onehot)), dx [n, D] = dlogits W
 * (0 rows for ignored targets). Returns the sum of the token losses. */
static double lm_head_loss_ref_bf16(float *dx, const float *x, const float *w, const int32_t *tg, int64_t n, int64_t D,
                                    int64_t V, float gs) {
    float *lg = malloc(sizeof(float) * (size_t)(n * V));
    qlt_cpu_gemm(0, 1, n, V, D, 1.0f, x, D, w, D, 0.0f, lg, V);
    double loss = 0;
    for (int64_t t = 0; t < n; t++) {
        float *row = lg + t * V;
        for (int64_t j = 0; j < V; j++) row[j] = bfr(row[j]);
        if (tg[t] < 0) {
            memset(row, 0, sizeof(float) * (size_t)V);
            continue;
        }
        double m = row[0], sum = 0;
        for (int64_t j = 1; j < V; j++) m = row[j] > m ? row[j] : m;
        for (int64_t j = 0; j < V; j++) sum += exp(row[j] - m);
        const double lse = m + log(sum);
        loss += lse - row[tg[t]];
        for (int64_t j = 0; j < V; j++) row[j] = bfr((float)(gs * (exp(row[j] - lse) - (j == tg[t] ? 1.0 : 0.0))));
    }
    qlt_cpu_gemm(0, 0, n, D, V, 1.0f, lg, V, w, D, 0.0f, dx, D);
    free(lg);
    return loss;
}

void check_lm_head_loss(void) {
    if (!gpu()) return;
    gpu_rng r = {18};
    const int64_t shapes[][3] = {{7, 1000, 64}, {300, 1001, 96}, {4100, 512, 64}, {1, 2048, 128}};
    for (int s = 0; s < 4; s++) {
        int64_t n = shapes[s][0], V = shapes[s][1], D = shapes[s][2];
        char sh[64];
        snprintf(sh, sizeof sh, "N%lld V%lld D%lld", (long long)n, (long long)V, (long long)D);
        float *x = hrand(&r, n * D, 1.0f), *w = hrand(&r, V * D, 0.2f);
        int32_t *tg = malloc(sizeof(int32_t) * (size_t)n);
        int64_t counted = 0;
        for (int64_t t = 0; t < n; t++) {
            tg[t] = (n > 1 && gpu_rng_uniform(&r) < 0.2f) ? -100 : (int32_t)(gpu_rng_uniform(&r) * V);
            counted += tg[t] >= 0;
        }
        float gs = 1.0f / (float)(counted ? counted : 1);
        float *dx_ref = malloc(sizeof(float) * (size_t)(n * D));
        double loss_ref = lm_head_loss_ref_bf16(dx_ref, x, w, tg, n, D, V, gs);
        const int64_t ch = n < 4096 ? n : 4096;
        qlt_weight wt;
        if (weight(&wt, w, V, D)) return;
        qlt_optim_scalars sc0 = {0};
        sc0.loss_sum = 0.5f; /* accumulates onto the existing value */
        sc0.grad_scale = gs;
        qlt_optim_scalars *dsc = dalloc(sizeof sc0);
        G->upload(G, dsc, &sc0, sizeof sc0);
        void *ddx = dpoison(2 * (size_t)(n * D)), *dscr = dpoison((size_t)ch * (size_t)(V + 2) * 4);
        void *dx_in = dbf16(x, n * D);
        int32_t *dtg = di32(tg, n);
        G->lm_head_loss(G, dsc, ddx, dscr, dx_in, &wt, dtg, n);
        qlt_optim_scalars sc;
        G->download(G, &sc, dsc, sizeof sc);
        float got_loss = sc.loss_sum - 0.5f;
        gpu_check_row("lm_head_loss loss_sum", sh, fabs((double)got_loss - loss_ref) / fabs(loss_ref), 1e-4, "rel");
        float *dx = hget_bf16(ddx, n * D);
        row("lm_head_loss dx", sh, dx, dx_ref, n * D, 1e-2);
        /* loss only (dx NULL) */
        G->upload(G, dsc, &sc0, sizeof sc0);
        G->lm_head_loss(G, dsc, NULL, dscr, dx_in, &wt, dtg, n);
        G->download(G, &sc, dsc, sizeof sc);
        gpu_check_row("lm_head_loss (no dx)", sh, fabs((double)(sc.loss_sum - 0.5f) - loss_ref) / fabs(loss_ref), 1e-4,
                      "rel");
        /* logits (fp32) */
        if (n <= 300) {
            float *lref = malloc(sizeof(float) * (size_t)(n * V));
            qlt_cpu_gemm(0, 1, n, V, D, 1.0f, x, D, w, D, 0.0f, lref, V);
            float *dl = dpoison(4 * (size_t)(n * V));
            G->logits(G, dl, dx_in, &wt, n);
            float *lg = hget_f32(dl, n * V);
            row("logits (fp32)", sh, lg, lref, n * V, 1e-5);
            free(lref), free(lg);
        }
        G->weight_free(G, &wt);
        dfree_all();
        free(x), free(w), free(tg), free(dx_ref), free(dx);
    }
}

/* ---- optimizer ---- */

/* Poisoned steps against the CPU twin (qlt_optim_guard on both): a NaN gradient, an infinite one, a NaN loss_sum with
 * a finite gradient. Each sets skip and counts it on both, and AdamW leaves p, m and v bit for bit; the good step
 * after them is Adam's step 1 on both, with the same bias corrections and the same update. */
static void check_optimizer_skips(void) {
    gpu_rng r = {23};
    const int64_t n = 100003;
    qlt_backend *cpu = qlt_backend_cpu_create(1, 1);
    float *g = hrand_f32(&r, n, 0.5f), *p = hrand_f32(&r, n, 0.1f);
    float *m = malloc(sizeof(float) * (size_t)n), *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) m[i] = 0.01f * gpu_rng_normal(&r), v[i] = 0.001f * gpu_rng_uniform(&r);
    float *p0 = malloc(sizeof(float) * (size_t)n), *m0 = malloc(sizeof(float) * (size_t)n);
    float *v0 = malloc(sizeof(float) * (size_t)n);
    memcpy(p0, p, sizeof(float) * (size_t)n), memcpy(m0, m, sizeof(float) * (size_t)n);
    memcpy(v0, v, sizeof(float) * (size_t)n);
    float *dp = df32(p, n), *dm = df32(m, n), *dv = df32(v, n);
    qlt_optim_scalars host = {0}, cpu_sc;
    host.lr = 1e-3f, host.beta1 = 0.9f, host.beta2 = 0.999f, host.eps = 1e-8f, host.weight_decay = 0.01f;
    host.max_grad_norm = 1.0f;
    qlt_optim_scalars *dsc = dalloc(sizeof host);
    G->upload(G, dsc, &host, sizeof host);
    cpu_sc = host;
    static const char *const cases[] = {"NaN gradient", "infinite gradient", "NaN loss_sum", "good step after"};
    for (int c = 0; c < 4; c++) {
        float poison = c == 0 ? NAN : INFINITY, keep = g[n / 2];
        if (c < 2) g[n / 2] = poison;
        float *dg_step = df32(g, n);
        if (c < 2) g[n / 2] = keep;
        /* the host part of the scalars as the trainer sends it: loss_sum 0 (NaN for the third case) */
        host.loss_sum = c == 2 ? NAN : 0.0f;
        G->upload(G, dsc, &host, QLT_OPTIM_HOST_BYTES);
        memcpy(&cpu_sc, &host, QLT_OPTIM_HOST_BYTES);
        G->grad_norm_sq(G, dsc, dg_step, n);
        G->adamw(G, dp, dg_step, dm, dv, n, dsc);
        float *gc = malloc(sizeof(float) * (size_t)n);
        memcpy(gc, g, sizeof(float) * (size_t)n);
        if (c < 2) gc[n / 2] = poison;
        cpu->grad_norm_sq(cpu, &cpu_sc, gc, n);
        cpu->adamw(cpu, p, gc, m, v, n, &cpu_sc);
        free(gc);
        qlt_optim_scalars got;
        G->download(G, &got, dsc, sizeof got);
        int want_skip = c < 3;
        gpu_check_row("skip flag", cases[c], got.skip == want_skip && cpu_sc.skip == want_skip ? 0.0 : 1.0, 0.0,
                      "differs");
        gpu_check_row("skip counters", cases[c],
                      got.skipped_steps == cpu_sc.skipped_steps && got.bad_streak == cpu_sc.bad_streak &&
                              got.adam_step == cpu_sc.adam_step && got.adam_step == (c == 3)
                          ? 0.0
                          : 1.0,
                      0.0, "differs");
        float *hp = hget_f32(dp, n), *hm = hget_f32(dm, n), *hv = hget_f32(dv, n);
        size_t bytes = sizeof(float) * (size_t)n;
        if (want_skip) {
            gpu_check_row("adamw skipped: p, m, v unchanged", cases[c],
                          memcmp(hp, p0, bytes) || memcmp(hm, m0, bytes) || memcmp(hv, v0, bytes) ||
                                  memcmp(p, p0, bytes) || memcmp(m, m0, bytes) || memcmp(v, v0, bytes)
                              ? 1.0
                              : 0.0,
                          0.0, "changed");
        } else {
            gpu_check_row("bias corrections (step 1)", cases[c],
                          memcmp(&got.bias_correction1, &cpu_sc.bias_correction1, 4) ||
                                  memcmp(&got.bias_correction2, &cpu_sc.bias_correction2, 4)
                              ? 1.0
                              : 0.0,
                          0.0, "differs");
            row("adamw p after skips", cases[c], hp, p, n, 1e-6);
            row("adamw m after skips", cases[c], hm, m, n, 1e-6);
            row("adamw v after skips", cases[c], hv, v, n, 1e-6);
        }
        free(hp), free(hm), free(hv);
    }
    dfree_all();
    cpu->destroy(cpu);
    free(g), free(p), free(m), free(v), free(p0), free(m0), free(v0);
}

void check_optimizer(void) {
    if (!gpu()) return;
    gpu_rng r = {19};
    const int64_t counts[] = {1, 1000, 1234567};
    for (int s = 0; s < 3; s++) {
        int64_t n = counts[s];
        char sh[64];
        snprintf(sh, sizeof sh, "count %lld", (long long)n);
        float *g = hrand_f32(&r, n, 0.5f), *p = hrand_f32(&r, n, 0.1f);
        float *m = malloc(sizeof(float) * (size_t)n), *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) m[i] = 0.01f * gpu_rng_normal(&r), v[i] = 0.001f * gpu_rng_uniform(&r);
        float *dg = df32(g, n), *dp = df32(p, n), *dm = df32(m, n), *dv = df32(v, n);
        qlt_optim_scalars sc = {0};
        qlt_optim_scalars *dsc = dalloc(sizeof sc);
        G->upload(G, dsc, &sc, sizeof sc);
        G->grad_norm_sq(G, dsc, dg, n);
        qlt_optim_scalars got1, got2;
        G->download(G, &got1, dsc, sizeof got1);
        G->grad_norm_sq(G, dsc, dg, n);
        G->download(G, &got2, dsc, sizeof got2);
        double ref = qlt_cpu_sumsq(g, n);
        gpu_check_row("grad_norm_sq", sh, fabs(got1.grad_norm_sq - ref) / ref, 1e-6, "rel");
        gpu_check_row("grad_norm_sq repeat bits", sh, memcmp(&got1.grad_norm_sq, &got2.grad_norm_sq, 4) ? 1.0 : 0.0,
                      0.0, "differs");
        /* three AdamW steps, clipping on (the norm exceeds max) then off */
        for (int step = 1; step <= 3; step++) {
            sc = got1;
            sc.lr = 1e-3f;
            sc.beta1 = 0.9f;
            sc.beta2 = 0.999f;
            sc.eps = 1e-8f;
            sc.weight_decay = 0.01f;
            sc.bias_correction1 = 1.0f - powf(0.9f, (float)step);
            sc.bias_correction2 = 1.0f - powf(0.999f, (float)step);
            sc.max_grad_norm = step < 3 ? 0.5f : 0.0f;
            G->upload(G, dsc, &sc, sizeof sc);
            G->adamw(G, dp, dg, dm, dv, n, dsc);
            float clip = qlt_clip_scale(sc.grad_norm_sq, sc.max_grad_norm);
            qlt_cpu_adamw(p, g, m, v, n, sc.lr, sc.beta1, sc.beta2, sc.eps, sc.weight_decay, sc.bias_correction1,
                          sc.bias_correction2, clip);
        }
        float *hp = hget_f32(dp, n), *hm = hget_f32(dm, n), *hv = hget_f32(dv, n);
        row("adamw p (3 steps)", sh, hp, p, n, 1e-6);
        row("adamw m", sh, hm, m, n, 1e-6);
        row("adamw v", sh, hv, v, n, 1e-6);
        dfree_all();
        free(g), free(p), free(m), free(v), free(hp), free(hm), free(hv);
    }
    check_optimizer_skips();
}

/* ---- CUDA graph capture: a chain of ops captured and replayed equals the eager run ---- */

void check_graph_capture(void) {
    if (!gpu()) return;
    gpu_rng r = {20};
    const int B = 2, S = 128, H = 4, KV = 2, HD = 64, D = H * HD, V = 512, RK = 8;
    const int64_t n = (int64_t)B * S;
    float *x = hrand(&r, n * D, 1.0f), *w = hrand(&r, (int64_t)D * D, 0.05f), *wl = hrand(&r, (int64_t)V * D, 0.1f);
    float *a = hrand_f32(&r, (int64_t)RK * D, 0.1f), *b = hrand_f32(&r, (int64_t)D * RK, 0.1f);
    float *nw = hrand_f32(&r, D, 1.0f);
    int32_t *seg = malloc(sizeof(int32_t) * (size_t)n), *tg = malloc(sizeof(int32_t) * (size_t)n);
    make_segments(seg, &r, B, S, 50);
    for (int64_t t = 0; t < n; t++) tg[t] = (int32_t)(gpu_rng_uniform(&r) * V);
    qlt_weight wq, wk, wv, wh;
    if (weight(&wq, w, D, D) || weight(&wk, w, KV * HD, D) || weight(&wv, w + 7, KV * HD, D) || weight(&wh, wl, V, D))
        return;
    void *dx = dbf16(x, n * D), *xn = dalloc(2 * (size_t)(n * D)), *q = dalloc(2 * (size_t)(n * D));
    void *k = dalloc(2 * (size_t)(n * KV * HD)), *v = dalloc(2 * (size_t)(n * KV * HD)), *o = dalloc(2 * (size_t)(n * D));
    void *dxo = dalloc(2 * (size_t)(n * D)), *gq = dalloc(2 * (size_t)(n * D));
    void *gk = dalloc(2 * (size_t)(n * KV * HD)), *gv = dalloc(2 * (size_t)(n * KV * HD));
    float *rstd = dalloc(4 * (size_t)n), *lse = dalloc(4 * (size_t)(n * H)), *u = dalloc(4 * (size_t)(n * RK));
    float *dscr = dalloc(G->attention_bwd_scratch_bytes(G, n, H, KV, HD));
    float *da = df32(a, (int64_t)RK * D), *db = df32(b, (int64_t)D * RK), *dnw = df32(nw, D);
    int32_t *dseg = di32(seg, n), *dtg = di32(tg, n);
    void *scr = dalloc((size_t)n * (V + 2) * 4);
    qlt_optim_scalars sc0 = {0};
    sc0.grad_scale = 1.0f / (float)n;
    qlt_optim_scalars *dsc = dalloc(sizeof sc0);
    float *results[2][3];
    float losses[2];
    cudaStream_t st = (cudaStream_t)qlt_cuda_stream(G);
    /* deterministic ops: the replay is bit-identical; the default one-pass attention backward adds dQ with
     * atomics in a varying order, so dQ may differ in its last bits (dK, dV and the loss may not) */
    const int most = max_row_segments(seg, B, S); /* the ragged slots cuDNN's attention takes (via 1) */
    for (int via = 0; via <= 1; via++) {
    for (int det = 1; det >= 0; det--) {
    G->deterministic = det;
    G->max_row_examples = via ? most : 0;
    const int kind = G->attention_plan(G, B, S, H, KV, HD, 1.0f / 8.0f);
    if (via && !kind) continue;
    for (int pass = 0; pass < 2; pass++) { /* pass 0 eager, pass 1 captured and replayed */
        G->upload(G, dsc, &sc0, sizeof sc0);
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        if (pass == 1 && cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
            gpu_check_fail("graph capture", "cudaStreamBeginCapture failed");
            return;
        }
        G->rmsnorm_fwd(G, xn, rstd, dx, dnw, n, D, 1e-6f);
        const qlt_weight *pq = &wq, *pk = &wk, *pv = &wv;
        qlt_lora_site site = {q, NULL, D, D, da, db, NULL, NULL};
        G->linear_fwd(G, q, xn, &pq, 1, NULL, n);
        G->lora_fwd(G, &site, 1, u, xn, n, D, RK, 2.0f);
        G->linear_fwd(G, k, xn, &pk, 1, NULL, n);
        G->linear_fwd(G, v, xn, &pv, 1, NULL, n);
        G->attention_fwd(G, o, lse, q, k, v, dseg, B, S, H, KV, HD, 1.0f / 8.0f);
        G->lm_head_loss(G, dsc, dxo, scr, o, &wh, dtg, n);
        G->attention_bwd(G, gq, gk, gv, dscr, dxo, o, lse, q, k, v, dseg, B, S, H, KV, HD, 1.0f / 8.0f);
        if (pass == 1) {
            cudaError_t e1 = cudaStreamEndCapture(st, &graph);
            cudaError_t e2 = e1 == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : e1;
            cudaError_t e3 = e2 == cudaSuccess ? cudaGraphLaunch(exec, st) : e2;
            if (e3 != cudaSuccess) {
                gpu_check_fail("graph capture", cudaGetErrorString(e3));
                return;
            }
        }
        results[pass][0] = hget_bf16(gq, n * D);
        results[pass][1] = hget_bf16(gk, n * KV * HD);
        results[pass][2] = hget_bf16(gv, n * KV * HD);
        qlt_optim_scalars sc;
        G->download(G, &sc, dsc, sizeof sc);
        losses[pass] = sc.loss_sum;
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
    }
    char sh[96];
    snprintf(sh, sizeof sh, "B2 S128 H4/2 hd64 V512%s%s", kind ? " cudnn ragged" : "", det ? " deterministic" : "");
    gpu_check_row("graph replay == eager loss", sh, fabs((double)losses[0] - losses[1]), 0.0, "abs");
    /* cuDNN's non-deterministic backward may also sum GQA's dK / dV with atomics */
    row("graph replay == eager dq", sh, results[1][0], results[0][0], n * D, det ? 0.0 : 1e-3);
    row("graph replay == eager dk", sh, results[1][1], results[0][1], n * KV * HD, det || !kind ? 0.0 : 1e-3);
    row("graph replay == eager dv", sh, results[1][2], results[0][2], n * KV * HD, det || !kind ? 0.0 : 1e-3);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) free(results[i][j]);
    }
    }
    G->deterministic = 0;
    G->max_row_examples = 0;
    G->weight_free(G, &wq), G->weight_free(G, &wk), G->weight_free(G, &wv), G->weight_free(G, &wh);
    dfree_all();
    free(x), free(w), free(wl), free(a), free(b), free(nw), free(seg), free(tg);
}

/* ---- performance ---- */

/* attention fwd + bwd timings at batch B, seq 2048, heads 28 / 4, head_dim 128 (Qwen2.5-7B): causal and
 * packed (examples of up to 512 tokens), and the deterministic backward */
static void perf_attention(gpu_rng *rp, int B) {
    gpu_rng r = *rp;
    const int S = 2048, H = 28, KV = 4, HD = 128;
    int64_t n = (int64_t)B * S, qn = n * H * HD, kn = n * KV * HD;
    float *h = hrand(&r, qn, 1.0f);
    void *q = dbf16(h, qn), *k = dbf16(h, kn), *v = dbf16(h + kn, kn), *o = dalloc(2 * (size_t)qn);
    void *dout = dbf16(h, qn), *dq = dalloc(2 * (size_t)qn), *dk = dalloc(2 * (size_t)kn),
         *dv = dalloc(2 * (size_t)kn);
    float *lse = dalloc(4 * (size_t)(n * H)), *scr = dalloc(G->attention_bwd_scratch_bytes(G, n, H, KV, HD));
    int32_t *seg = calloc((size_t)n, sizeof(int32_t));
    int32_t *dseg = di32(seg, n);
    float scale = 1.0f / sqrtf((float)HD);
    double flops_fwd = 4.0 * B * H * (double)S * S / 2 * HD, flops_bwd = 2.5 * flops_fwd;
    /* variants: causal (own kernels; cuDNN dense; cuDNN ragged with 2 slots a row, one empty), then packed
     * examples of up to 512 tokens (own kernels; cuDNN ragged) */
    static const char *variant_name[] = {"causal", "causal cudnn", "causal cudnn ragged", "packed",
                                         "packed cudnn ragged"};
    for (int variant = 0; variant < 5; variant++) {
        const int packed = variant >= 3;
        if (variant == 3) {
            make_segments(seg, &r, B, S, 512);
            G->upload(G, dseg, seg, sizeof(int32_t) * (size_t)n);
        }
        const int most = max_row_segments(seg, B, S);
        G->max_row_examples = variant == 1 ? 1 : variant == 2 ? 2 : variant == 4 ? most : 0;
        if (G->max_row_examples && G->attention_plan(G, B, S, H, KV, HD, scale) == 0) continue;
        double tf = 0, tb = 0;
        for (int it = 0; it < 12; it++) {
            G->sync(G);
            double t0 = gpu_check_now_s();
            G->attention_fwd(G, o, lse, q, k, v, dseg, B, S, H, KV, HD, scale);
            G->sync(G);
            double t1 = gpu_check_now_s();
            G->attention_bwd(G, dq, dk, dv, scr, dout, o, lse, q, k, v, dseg, B, S, H, KV, HD, scale);
            G->sync(G);
            double t2 = gpu_check_now_s();
            if (it >= 2) tf += t1 - t0, tb += t2 - t1;
        }
        tf /= 10, tb /= 10;
        char sh[64];
        snprintf(sh, sizeof sh, "B%d S2048 H28/4 hd128 %s", B, variant_name[variant]);
        gpu_check_perf("attention_fwd ms", sh, tf * 1e3, "ms");
        gpu_check_perf("attention_bwd ms", sh, tb * 1e3, "ms");
        if (!packed) {
            gpu_check_perf("attention_fwd TFLOP/s", sh, flops_fwd / tf / 1e12, "TFLOP/s");
            gpu_check_perf("attention_bwd TFLOP/s", sh, flops_bwd / tb / 1e12, "TFLOP/s");
            gpu_check_perf("attention fwd+bwd TFLOP/s", sh, (flops_fwd + flops_bwd) / (tf + tb) / 1e12, "TFLOP/s");
        }
    }
    /* the deterministic backward, causal: the own two-kernel one, and cuDNN's (dense) */
    memset(seg, 0, sizeof(int32_t) * (size_t)n);
    G->upload(G, dseg, seg, sizeof(int32_t) * (size_t)n);
    G->deterministic = 1;
    for (int cudnn = 0; cudnn <= 1; cudnn++) {
        G->max_row_examples = cudnn;
        if (cudnn && G->attention_plan(G, B, S, H, KV, HD, scale) == 0) continue;
        G->attention_fwd(G, o, lse, q, k, v, dseg, B, S, H, KV, HD, scale); /* lse in the layout the side keeps */
        double tb = 0;
        for (int it = 0; it < 12; it++) {
            G->sync(G);
            double t1 = gpu_check_now_s();
            G->attention_bwd(G, dq, dk, dv, scr, dout, o, lse, q, k, v, dseg, B, S, H, KV, HD, scale);
            G->sync(G);
            if (it >= 2) tb += gpu_check_now_s() - t1;
        }
        char shd[64];
        snprintf(shd, sizeof shd, "B%d S2048 H28/4 hd128 causal%s deterministic", B, cudnn ? " cudnn" : "");
        gpu_check_perf("attention_bwd ms", shd, tb / 10 * 1e3, "ms");
    }
    G->deterministic = 0;
    G->max_row_examples = 0;
    dfree_all();
    free(h), free(seg);
    *rp = r;
}

void check_perf(void) {
    if (!gpu()) return;
    gpu_rng r = {21};
    perf_attention(&r, 4);
    perf_attention(&r, 1);
    /* fused lm_head + CE: N 8192, V 151936, D 3584 */
    {
        const int64_t n = 8192, V = 151936, D = 3584;
        float *wh = malloc(sizeof(float) * (size_t)(V * D));
        for (int64_t i = 0; i < V * D; i++) wh[i] = 0.02f * (gpu_rng_uniform(&r) - 0.5f);
        qlt_weight w;
        if (weight(&w, wh, V, D)) return;
        free(wh);
        float *x = hrand(&r, n * D, 1.0f);
        int32_t *tg = malloc(sizeof(int32_t) * (size_t)n);
        for (int64_t t = 0; t < n; t++) tg[t] = (int32_t)(gpu_rng_uniform(&r) * V);
        void *dx_in = dbf16(x, n * D), *ddx = dalloc(2 * (size_t)(n * D));
        void *scr = dalloc((size_t)4096 * (size_t)(V + 2) * 4);
        int32_t *dtg = di32(tg, n);
        qlt_optim_scalars sc0 = {0};
        sc0.grad_scale = 1.0f / (float)n;
        qlt_optim_scalars *dsc = dalloc(sizeof sc0);
        G->upload(G, dsc, &sc0, sizeof sc0);
        double tt = 0;
        for (int it = 0; it < 5; it++) {
            G->sync(G);
            double t0 = gpu_check_now_s();
            G->lm_head_loss(G, dsc, ddx, scr, dx_in, &w, dtg, n);
            G->sync(G);
            if (it >= 1) tt += gpu_check_now_s() - t0;
        }
        tt /= 4;
        gpu_check_perf("lm_head_loss ms", "N8192 V151936 D3584", tt * 1e3, "ms");
        gpu_check_perf("lm_head_loss GEMM TFLOP/s", "N8192 V151936 D3584", 4.0 * n * V * D / tt / 1e12, "TFLOP/s");
        G->weight_free(G, &w);
        dfree_all();
        free(x), free(tg);
    }
    /* backward-x precisions: dx [8192, 3584] = dy [8192, 18944] W [18944, 3584] (down_proj^T) */
    {
        const int64_t n = 8192, rows = 18944, cols = 3584;
        float *h = hrand(&r, rows * cols, 0.02f);
        qlt_weight w;
        if (weight(&w, h, rows, cols)) return;
        free(h);
        h = hrand(&r, n * rows, 1.0f);
        void *dy = dbf16(h, n * rows), *dx = dalloc(2 * (size_t)(n * cols));
        free(h);
        static const char *names[] = {"linear_bwd_x bf16 ms", "linear_bwd_x fp16 ms", "linear_bwd_x fp32 ms"};
        for (int mode = 0; mode < 3; mode++) {
            G->backward_a = (qlt_backward_a)mode;
            double tt = 0;
            for (int it = 0; it < 6; it++) {
                G->sync(G);
                double t0 = gpu_check_now_s();
                const qlt_weight *wp = &w;
                G->linear_bwd_x(G, dx, dy, &wp, 1, n, 0.0f);
                G->sync(G);
                if (it >= 1) tt += gpu_check_now_s() - t0;
            }
            tt /= 5;
            gpu_check_perf(names[mode], "N8192 18944->3584", tt * 1e3, "ms");
        }
        G->backward_a = QLT_BACKWARD_A_BF16;
        G->weight_free(G, &w);
        dfree_all();
    }
    size_t cur = 0, peak = 0, used = 0, total = 0;
    qlt_cuda_memory_report(G, &cur, &peak, &used, &total);
    gpu_check_perf("backend peak memory", "all checks", (double)peak / (1 << 20), "MiB");
}
