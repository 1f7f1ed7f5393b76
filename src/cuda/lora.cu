/* lora.cu: the LoRA side path on tensor cores, for a group of k projections that read the same input
 * (q/k/v, gate/up, or one projection): x.A^T, dA and the adapters' share of dx are one GEMM each for the
 * whole group, so x is read once and dx read and written once, whatever k is.
 *
 * Precision: A, B, u, du are fp32; tensor-core GEMMs need one type on both sides, so each fp32 operand f
 * is split into bf16 hi = bf16(f), lo = bf16(f - hi) (f = hi + lo to ~2^-17 relative). Products of an
 * fp32 with a bf16 activation use both halves ([hi | lo] as one GEMM of twice the width, the halves
 * summed in fp32 after); products of two fp32 operands use hi*hi + hi*lo + lo*hi as ONE GEMM over a
 * concatenated K = 3r, so a bf16 output is rounded once. Parameter gradients carry only the bf16
 * rounding of the activations (x, dy), as fp32 LoRA math on bf16 activations would.
 *
 * Workspaces: sized at load by lora_group_prepare for every group the forward will use (no fixed limit
 * on r or the widths), never grown in a step.
 * Layouts (impl->lora_ws, bf16): A3 [k*3r, in] = per site [Ah; Al; Ah]; B3_i [out_i, 3r] = columns
 * [bh | bl | bh]; token chunks T3 [T, k*3r] = per site columns [lo | hi | hi] of u (or du). Then
 *   x . A3^T        -> per site [x Ah | x Al | x Ah]: the first two summed give u_i;
 *   T3_i . B3_i^T   = ul bh + uh bl + uh bh = (u B^T) to ~2^-17;
 *   T3^T . x        -> per site rows [dul^T x; duh^T x; duh^T x]: the first two summed give dA_i;
 *   T3 . A3         = sum_i dul Ah + duh Al + duh Ah = sum_i du_i A_i (the group's dx in one GEMM);
 *   dy_i . B3_i[:, :2r] and dy_i^T . T3_i[:, :2r] give du_i and dB_i as hi/lo pairs (the cuBLAS path; where
 *   the shape allows, lora_dudb.cu computes both in one pass over dy instead).
 * linear_lora_fwd folds a stack's adapters into its frozen GEMM: [x | T3] . [W | scale B3]^T is the
 * forward in one product over K = in + 3kr (the weight dequantized into rows of that width). */
#include "cuda/cuda_common.h"
#include "cuda/lora_dudb.h"

/* The group's bf16 operands in one launch: site i's A [r, in] -> A3 block [hi(A); lo(A); hi(A)] at
 * a3 + i 3r in, and its B [out_i, r] -> B3_i [out_i, 3r] with columns [hi | lo | hi]. */
typedef struct prep_args {
    const float *a[QLT_STACK_MAX], *b[QLT_STACK_MAX];
    bf16 *a3, *b3[QLT_STACK_MAX];
    int64_t out[QLT_STACK_MAX], in;
    int k, r;
} prep_args;

/* grid (blocks, 2k): y = 2i splits site i's A, y = 2i + 1 its B (nothing when out[i] is 0) */
static __global__ void prep_kernel(const __grid_constant__ prep_args p) {
    const int site = blockIdx.y >> 1;
    const bool is_b = blockIdx.y & 1;
    const int64_t count = is_b ? p.out[site] * p.r : (int64_t)p.r * p.in;
    const float *src = is_b ? p.b[site] : p.a[site];
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
        const float v = src[e];
        const bf16 hi = __float2bfloat16(v), lo = __float2bfloat16(v - __bfloat162float(hi));
        bf16 *o;
        int64_t step;
        if (is_b) {
            const int64_t row = e / p.r;
            o = p.b3[site] + row * 3 * p.r + (e - row * p.r), step = p.r;
        } else {
            o = p.a3 + site * 3 * count + e, step = count;
        }
        o[0] = hi;
        o[step] = lo;
        o[2 * step] = hi;
    }
}

/* x [rows, k*r] -> out [rows, k*3r] (row stride ld_out): site s's r values become three r-wide blocks
 * [lo | hi | hi] (the token operand T3 of every product above). */
static __global__ void split3_kernel(bf16 *out, int64_t ld_out, const float *x, int64_t rows, int r, int k) {
    int kr = k * r;
    int64_t total = rows * kr;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / kr;
        int c = (int)(i - row * kr), site = c / r, j = c - site * r;
        qlt_store_t3(out + row * ld_out, site, r, j, x[i]);
    }
}

static void split3(cudaStream_t s, bf16 *out, int64_t ld_out, const float *x, int64_t rows, int r, int k) {
    split3_kernel<<<qlt_grid(rows * k * r, 256), 256, 0, s>>>(out, ld_out, x, rows, r, k);
    CUDA_CHECK_LAUNCH();
}

/* dst[i, j] = (accumulate ? dst[i, j] : 0) + src[i*lds + j] + src[i*lds + j + off], i < rows, j < cols:
 * the sum of the hi and lo halves of a product (column halves: off = r; row halves: off = r * lds), for up
 * to QLT_STACK_MAX blocks (one a site) in one launch. */
typedef struct halves_args {
    float *dst[QLT_STACK_MAX];
    const float *src[QLT_STACK_MAX];
    int64_t ldd[QLT_STACK_MAX], lds[QLT_STACK_MAX], off[QLT_STACK_MAX], rows[QLT_STACK_MAX], cols[QLT_STACK_MAX];
    int k, accumulate;
} halves_args;

static __global__ void sum_halves_sites_kernel(halves_args h) {
    int64_t total = 0;
    for (int i = 0; i < h.k; i++) total += h.rows[i] * h.cols[i];
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int i = 0;
        int64_t e = idx;
        while (e >= h.rows[i] * h.cols[i]) e -= h.rows[i] * h.cols[i], i++;
        int64_t row = e / h.cols[i], col = e - row * h.cols[i];
        const float *src = h.src[i] + row * h.lds[i] + col;
        float v = src[0] + src[h.off[i]];
        float *d = h.dst[i] + row * h.ldd[i] + col;
        *d = h.accumulate ? *d + v : v;
    }
}

static void sum_halves_sites(cudaStream_t s, const halves_args *h) {
    int64_t total = 0;
    for (int i = 0; i < h->k; i++) total += h->rows[i] * h->cols[i];
    sum_halves_sites_kernel<<<qlt_grid(total, 256), 256, 0, s>>>(*h);
    CUDA_CHECK_LAUNCH();
}

/* site i of a halves_args */
static void halves_set(halves_args *h, int i, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t off,
                       int64_t rows, int64_t cols) {
    h->dst[i] = dst, h->ldd[i] = ldd, h->src[i] = src, h->lds[i] = lds, h->off[i] = off, h->rows[i] = rows;
    h->cols[i] = cols;
}

/* u [rows, k*r] from the forward product P [rows, k*3r] (per site [x Ah | x Al | x Ah]): u_s = P_s0 + P_s1;
 * when tok is not NULL also its T3 copy tok [rows, ld_tok] (per site [lo | hi | hi], as split3 writes) */
static __global__ void sum_first_two_kernel(float *u, const float *p, int64_t rows, int r, int k, bf16 *tok,
                                            int64_t ld_tok) {
    int kr = k * r;
    int64_t total = rows * kr;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / kr;
        int c = (int)(i - row * kr), site = c / r, j = c - site * r;
        const float *src = p + row * 3 * kr + (int64_t)site * 3 * r + j;
        const float v = src[0] + src[r];
        u[i] = v;
        if (tok) qlt_store_t3(tok + row * ld_tok, site, r, j, v);
    }
}

#define LORA_MIN_TOKENS 16     /* the smallest token chunk a workspace may leave */
#define LORA_CHUNK_TOKENS 4096 /* the token chunk lora_group_prepare sizes the operand workspace for */

typedef struct lora_ws {
    bf16 *a3;                 /* [k*3r, in] */
    bf16 *b3[QLT_STACK_MAX];  /* [out_i, 3r] */
    bf16 *tok;                /* [T, k*3r] */
    int64_t T;                /* tokens per chunk of tok */
} lora_ws;

/* The workspace laid out for this group, with A3 (and, when with_b, each B3) built from the current A and B. */
static lora_ws lora_prepare(qlt_backend *be, const qlt_lora_site *sites, int k, int64_t in, int r, int64_t n,
                            bool with_b) {
    cuda_impl *impl = cuda_impl_of(be);
    cudaStream_t s = impl->stream;
    QLT_ASSERT(k >= 1 && k <= QLT_STACK_MAX);
    int64_t r3 = 3 * (int64_t)r, weights = (int64_t)k * r3 * in;
    for (int i = 0; i < k; i++) weights += sites[i].out * r3;
    int64_t cap = (int64_t)(impl->lora_ws_bytes / sizeof(bf16));
    int64_t tok_off = (weights + 7) & ~(int64_t)7; /* keep the token area 16-byte aligned */
    QLT_ASSERT(tok_off + k * r3 * LORA_MIN_TOKENS <= cap); /* lora_group_prepare sized it at load */
    lora_ws L;
    L.a3 = (bf16 *)impl->lora_ws;
    bf16 *next = L.a3 + (int64_t)k * r3 * in;
    prep_args p;
    memset(&p, 0, sizeof p);
    p.a3 = L.a3, p.in = in, p.k = k, p.r = r;
    int64_t largest = (int64_t)r * in;
    for (int i = 0; i < k; i++) {
        L.b3[i] = p.b3[i] = next;
        p.a[i] = sites[i].a, p.b[i] = sites[i].b, p.out[i] = with_b ? sites[i].out : 0;
        next += sites[i].out * r3;
        if (p.out[i] * r > largest) largest = p.out[i] * r;
    }
    prep_kernel<<<dim3(qlt_grid(largest, 256), 2 * k), 256, 0, s>>>(p);
    CUDA_CHECK_LAUNCH();
    L.tok = (bf16 *)impl->lora_ws + tok_off;
    L.T = (cap - tok_off) / (k * r3);
    if (L.T > n) L.T = n;
    return L;
}

/* Tokens per chunk whose fp32 [tokens, width] products fit the accumulation workspace. */
static int64_t acc_tokens(const cuda_impl *impl, int64_t width, int64_t n) {
    int64_t t = (int64_t)(impl->lora_acc_bytes / sizeof(float)) / width;
    return t < n ? t : n;
}

/* Grows a workspace to at least `need` bytes (load time: synchronizes, reallocates). */
static int grow(qlt_backend *be, void **p, size_t *bytes, size_t need, const char *what) {
    cuda_impl *impl = cuda_impl_of(be);
    if (impl->plan.on) { /* note the size only */
        size_t *want = p == &impl->lora_ws ? &impl->plan.lora_ws_bytes : &impl->plan.lora_acc_bytes;
        if (need > *want) *want = need;
        return 0;
    }
    if (need <= *bytes) return 0;
    CUDA_CHECK(cudaStreamSynchronize(impl->stream));
    qlt_cuda_free_tracked(be, *p, *bytes);
    *p = qlt_cuda_alloc_tracked(be, need);
    *bytes = *p ? need : 0;
    if (!*p) return qlt_fail("CUDA: out of device memory for the LoRA %s (%.1f MiB)", what, (double)need / (1 << 20));
    return 0;
}

/* Whether a non-stacked weight with out rows joins its group's folded backward GEMM (linear_lora_bwd below). */
static bool bwd_folds(int64_t out, int64_t in) {
    return out * 4 <= in;
}

/* Rows of the group's folded backward weight [W_j...; A3] (its dequantization room), for the bf16 backward. */
static int64_t bwd_fold_rows(int k, int64_t in, const int64_t *outs, int r) {
    int64_t rows = 3 * (int64_t)k * r;
    for (int i = 0; i < k; i++)
        if (bwd_folds(outs[i], in)) rows += outs[i];
    return rows;
}

int qlt_cuda_lora_group_prepare(qlt_backend *be, int k, int64_t in, const int64_t *outs, int r) {
    cuda_impl *impl = cuda_impl_of(be);
    const int64_t r3 = 3 * (int64_t)r, k3r = k * r3;
    int64_t sum_out = 0;
    for (int i = 0; i < k; i++) sum_out += outs[i];
    /* operands: A3 + every B3 + token chunks of LORA_CHUNK_TOKENS (fewer, larger GEMMs) */
    int64_t ws = ((k3r * in + r3 * sum_out + 7) & ~(int64_t)7) + k3r * LORA_CHUNK_TOKENS;
    /* products: x A3^T / dA [k3r, in], every dB [out_i, 2r], token chunks of du and u */
    int64_t acc = k3r * in;
    if (sum_out * 2 * r > acc) acc = sum_out * 2 * r;
    if (k3r * LORA_MIN_TOKENS > acc) acc = k3r * LORA_MIN_TOKENS;
    QLT_TRY(grow(be, &impl->lora_ws, &impl->lora_ws_bytes, sizeof(bf16) * (size_t)ws, "operand workspace"));
    /* linear_lora_bwd's folded backward weight [W_j...; A3] of the narrow outputs (when any) */
    const int64_t fold_rows = bwd_fold_rows(k, in, outs, r);
    if (fold_rows > k3r) QLT_TRY(qlt_cuda_reserve_dequant(be, fold_rows * in));
    return grow(be, (void **)&impl->lora_acc, &impl->lora_acc_bytes, sizeof(float) * (size_t)acc,
                "product workspace");
}

/* u [n, k*r] = x A^T for every site at once: one GEMM against A3 (x read once), hi + lo summed; with tok,
 * u's T3 [n, ld_tok] written in the same pass (the caller's area holds all n rows) */
static void lora_u(qlt_backend *be, const lora_ws *L, float *u, const void *x, int64_t n, int64_t in, int r, int k,
                   bf16 *tok, int64_t ld_tok) {
    cuda_impl *impl = cuda_impl_of(be);
    const int64_t kr = (int64_t)k * r, k3r = 3 * kr;
    const int64_t ta = acc_tokens(impl, k3r, n);
    for (int64_t t0 = 0; t0 < n; t0 += ta) {
        int64_t tn = n - t0 < ta ? n - t0 : ta;
        qlt_cuda_gemm(be, 0, 1, tn, k3r, in, 1.0f, (const bf16 *)x + t0 * in, CUDA_R_16BF, in, L->a3, CUDA_R_16BF, in,
                      0.0f, impl->lora_acc, CUDA_R_32F, k3r);
        sum_first_two_kernel<<<qlt_grid(tn * kr, 256), 256, 0, impl->stream>>>(
            u + t0 * kr, impl->lora_acc, tn, r, k, tok ? tok + t0 * ld_tok : NULL, ld_tok);
        CUDA_CHECK_LAUNCH();
    }
}

/* lora_fwd with y_i = y_beta y_i + scale u_i B_i^T (y_beta 0: the adapters' products written, not added) */
static void lora_fwd_onto(qlt_backend *be, const qlt_lora_site *sites, int k, float *u, const void *x, int64_t n,
                          int64_t in, int r, float scale, float y_beta) {
    if (n <= 0) return;
    cuda_impl *impl = cuda_impl_of(be);
    cudaStream_t s = impl->stream;
    lora_ws L = lora_prepare(be, sites, k, in, r, n, true);
    const int64_t kr = (int64_t)k * r, k3r = 3 * kr;
    const bool one_chunk = n <= L.T; /* then u's T3 comes with u */
    lora_u(be, &L, u, x, n, in, r, k, one_chunk ? L.tok : NULL, k3r);
    /* y_i = y_beta y_i + scale [ul uh uh]_i [bh bl bh]_i^T */
    for (int64_t t0 = 0; t0 < n; t0 += L.T) {
        int64_t tn = n - t0 < L.T ? n - t0 : L.T;
        if (!one_chunk) split3(s, L.tok, k3r, u + t0 * kr, tn, r, k);
        for (int i = 0; i < k; i++)
            qlt_cuda_gemm(be, 0, 1, tn, sites[i].out, 3 * r, scale, L.tok + (int64_t)i * 3 * r, CUDA_R_16BF, k3r,
                          L.b3[i], CUDA_R_16BF, 3 * r, y_beta, (bf16 *)sites[i].y + t0 * sites[i].ld, CUDA_R_16BF,
                          sites[i].ld);
    }
}

void qlt_cuda_lora_fwd(qlt_backend *be, const qlt_lora_site *sites, int k, float *u, const void *x, int64_t n,
                       int64_t in, int r, float scale) {
    lora_fwd_onto(be, sites, k, u, x, n, in, r, scale, 1.0f);
}

/* du_i = scale dy_i B_i for every site (du [n, k*r], fp32) and dB_i += scale dy_i^T u_i. One pass over dy
 * (lora_dudb.cu) where the group fits it, which also writes du's T3 to t3 [n, ld_t3] when t3 is not NULL
 * (then the return is true); otherwise two cuBLAS GEMMs a site. */
static bool lora_bwd_du_db(qlt_backend *be, const lora_ws *L, const qlt_lora_site *sites, int k, float *du,
                           const float *u, int64_t n, int r, float scale, bf16 *t3, int64_t ld_t3) {
    cuda_impl *impl = cuda_impl_of(be);
    cudaStream_t s = impl->stream;
    float *acc = impl->lora_acc;
    const int64_t kr = (int64_t)k * r, k3r = 3 * kr;
    if (impl->lora_dudb && qlt_cuda_lora_dudb(be, sites, k, L->b3, du, t3, ld_t3, u, n, r, scale)) return t3 != NULL;
    int64_t db_acc = 0; /* every site's [out_i, 2r] dB products side by side */
    for (int i = 0; i < k; i++) db_acc += sites[i].out * 2 * r;
    QLT_ASSERT(db_acc * (int64_t)sizeof(float) <= (int64_t)impl->lora_acc_bytes);
    /* du_i = scale dy_i (Bh + Bl): one GEMM a site against B3_i's columns [bh | bl] (dy read once), into its
     * own [tokens, 2r] block; the halves of every site summed by one launch */
    const int64_t ta = acc_tokens(impl, 2 * (int64_t)r * k, n);
    halves_args h;
    memset(&h, 0, sizeof h);
    h.k = k;
    for (int64_t t0 = 0; t0 < n; t0 += ta) {
        int64_t tn = n - t0 < ta ? n - t0 : ta;
        for (int i = 0; i < k; i++) {
            float *blk = acc + (int64_t)i * ta * 2 * r;
            qlt_cuda_gemm(be, 0, 0, tn, 2 * r, sites[i].out, scale, (const bf16 *)sites[i].dy + t0 * sites[i].ld,
                          CUDA_R_16BF, sites[i].ld, L->b3[i], CUDA_R_16BF, 3 * r, 0.0f, blk, CUDA_R_32F, 2 * r);
            halves_set(&h, i, du + t0 * kr + (int64_t)i * r, kr, blk, 2 * r, r, tn, r);
        }
        sum_halves_sites(s, &h);
    }
    /* dB_i += scale dy_i^T (ul + uh): one GEMM a site against its [ul | uh] columns, halves summed */
    h.accumulate = 1;
    for (int64_t t0 = 0; t0 < n; t0 += L->T) {
        int64_t tn = n - t0 < L->T ? n - t0 : L->T;
        split3(s, L->tok, k3r, u + t0 * kr, tn, r, k);
        float *blk = acc;
        for (int i = 0; i < k; i++) {
            qlt_cuda_gemm(be, 1, 0, sites[i].out, 2 * r, tn, scale, (const bf16 *)sites[i].dy + t0 * sites[i].ld,
                          CUDA_R_16BF, sites[i].ld, L->tok + (int64_t)i * 3 * r, CUDA_R_16BF, k3r, 0.0f, blk,
                          CUDA_R_32F, 2 * r);
            halves_set(&h, i, sites[i].db, r, blk, 2 * r, r, sites[i].out, r);
            blk += sites[i].out * 2 * r;
        }
        sum_halves_sites(s, &h);
    }
    return false;
}

/* dA_i += du_i^T x for tokens of one chunk: one GEMM T3^T x -> [k*3r, in] (x read once) from the chunk's
 * T3 [tn, k*3r] (row stride ldt), each site's first two row blocks summed into dA_i */
static void lora_bwd_da(qlt_backend *be, const qlt_lora_site *sites, int k, const bf16 *t3, int64_t ldt,
                        const bf16 *xc, int64_t tn, int64_t in, int r) {
    cuda_impl *impl = cuda_impl_of(be);
    const int64_t k3r = 3 * (int64_t)k * r;
    qlt_cuda_gemm(be, 1, 0, k3r, in, tn, 1.0f, t3, CUDA_R_16BF, ldt, xc, CUDA_R_16BF, in, 0.0f, impl->lora_acc,
                  CUDA_R_32F, in);
    halves_args h;
    memset(&h, 0, sizeof h);
    h.k = k;
    h.accumulate = 1;
    for (int i = 0; i < k; i++)
        halves_set(&h, i, sites[i].da, in, impl->lora_acc + (int64_t)i * 3 * r * in, in, (int64_t)r * in, r, in);
    sum_halves_sites(impl->stream, &h);
}

/* The token-chunk loop of a group's backward after du: chunk by chunk, dY' [tn, ld] = [dy_j of the folded
 * sites... | T3] is assembled in yp (T3 from du unless t3_done), dA_i += from its T3 columns, and, when dx is
 * not NULL, dx = dx_beta dx + dY' . W'' with W'' [ld, in] = [W_j...; A3]. lora_bwd has no folded sites (yp is
 * T3 alone, W'' = A3); linear_lora_bwd folds its narrow outputs and charges the GEMM to its own phase. */
typedef struct bwd_tokens {
    bf16 *yp;              /* [chunk, ld] */
    int64_t ld, chunk;
    const bf16 *wpp;       /* [ld, in] */
    const int *fold_site;  /* [nf]: the sites whose dy fills yp's first columns, in order */
    int nf;
    bool phases;           /* switch the backend phase between the adapters' work and the GEMM */
} bwd_tokens;

static void lora_bwd_tokens(qlt_backend *be, const qlt_lora_site *sites, int k, const bwd_tokens *b, const float *du,
                            bool t3_done, const void *x, void *dx, float dx_beta, int64_t n, int64_t in, int r) {
    cudaStream_t s = cuda_impl_of(be)->stream;
    const int64_t kr = (int64_t)k * r, fold_rows = b->ld - 3 * kr;
    for (int64_t t0 = 0; t0 < n; t0 += b->chunk) {
        int64_t tn = n - t0 < b->chunk ? n - t0 : b->chunk, col = 0;
        if (b->phases && be->phase) be->phase(be, QLT_PHASE_LORA);
        for (int j = 0; j < b->nf; j++) {
            const qlt_lora_site *sj = &sites[b->fold_site[j]];
            qlt_cuda_copy_rows(s, b->yp + col, b->ld, (const bf16 *)sj->dy + t0 * sj->ld, sj->ld, tn, sj->out);
            col += sj->out;
        }
        if (!t3_done) split3(s, b->yp + fold_rows, b->ld, du + t0 * kr, tn, r, k);
        lora_bwd_da(be, sites, k, b->yp + fold_rows, b->ld, (const bf16 *)x + t0 * in, tn, in, r);
        if (!dx) continue;
        if (b->phases && be->phase) be->phase(be, QLT_PHASE_BWD_GEMM);
        qlt_cuda_gemm(be, 0, 0, tn, in, b->ld, 1.0f, b->yp, CUDA_R_16BF, b->ld, b->wpp, CUDA_R_16BF, in, dx_beta,
                      (bf16 *)dx + t0 * in, CUDA_R_16BF, in);
    }
}

void qlt_cuda_lora_bwd(qlt_backend *be, const qlt_lora_site *sites, int k, float *scratch, const float *u,
                       const void *x, void *dx, float dx_beta, int64_t n, int64_t in, int r, float scale) {
    if (n <= 0) return;
    cuda_impl *impl = cuda_impl_of(be);
    lora_ws L = lora_prepare(be, sites, k, in, r, n, true);
    const int64_t k3r = 3 * (int64_t)k * r;
    QLT_ASSERT(in * k3r * (int64_t)sizeof(float) <= (int64_t)impl->lora_acc_bytes);
    float *du = scratch; /* [n, k*r] */
    const bool t3_done = lora_bwd_du_db(be, &L, sites, k, du, u, n, r, scale, n <= L.T ? L.tok : NULL, k3r);
    /* dx = beta dx + T3 A3: every site's du_i A_i in one GEMM (dx read and written once) */
    const bwd_tokens bt = {L.tok, k3r, L.T, L.a3, NULL, 0, false};
    lora_bwd_tokens(be, sites, k, &bt, du, t3_done, x, dx, dx_beta, n, in, r);
}

/* ---- a group's backward with its adapters (and its narrow outputs) folded into one GEMM ----
 * A weight's own backward GEMM dx += dy_j . W_j reads and writes dx [N, in] for a product over K = out_j: for
 * a narrow output (out_j <= in / 4: k and v, the down projection) that pass costs more than copying dy_j
 * [N, out_j] next to the adapters' du3, where the one GEMM [dy_j... | du3] . [W_j...; A3] takes it. That GEMM
 * runs first (with dx_beta; with no narrow output it is du3 . A3 alone) and the wide outputs' GEMMs add onto
 * dx after it (beta 1: a read of dx inside a compute-bound GEMM instead of the adapters' own pass over dx),
 * except a stack's (gate+up) GEMM over K = sum out_i, which goes first (see below). */

void qlt_cuda_linear_lora_bwd(qlt_backend *be, void *dx, float dx_beta, const qlt_weight *const *w, int k, int stacked,
                              const qlt_lora_site *sites, float *scratch, const float *u, const void *x, int64_t n,
                              int r, float scale) {
    if (n <= 0) return;
    cuda_impl *impl = cuda_impl_of(be);
    cudaStream_t s = impl->stream;
    const int64_t in = w[0]->cols, kr = (int64_t)k * r, k3r = 3 * kr;
    const qlt_phase was = impl->phase;
    /* the narrow outputs joining the adapters' GEMM (bf16 backward: fp16 / fp32 GEMMs have their own path) */
    const qlt_weight *folded[QLT_STACK_MAX];
    int fold_site[QLT_STACK_MAX], wide_site[QLT_STACK_MAX], nf = 0, nw = 0;
    int64_t fold_rows = 0;
    const bool one_gradient = stacked && k > 1; /* a stack's dy: one GEMM over all its weights */
    for (int i = 0; i < k; i++) {
        if (!one_gradient && be->backward_a == QLT_BACKWARD_A_BF16 && bwd_folds(w[i]->rows, in)) {
            folded[nf] = w[i], fold_site[nf++] = i, fold_rows += w[i]->rows;
        } else {
            wide_site[nw++] = i;
        }
    }
    const int64_t ld = fold_rows + k3r;
    /* a stack's one GEMM over its gradient goes first: its K is so long that reading dx in its epilogue (beta 1)
     * costs more than the adapters' second pass over dx. First of all:
     * the fp16 / fp32 backward GEMMs use the conversion workspace, which holds T3 from du's pass on */
    if (one_gradient) {
        if (be->phase) be->phase(be, QLT_PHASE_BWD_GEMM);
        qlt_cuda_linear_bwd_x(be, dx, sites[0].dy, w, k, n, dx_beta);
        dx_beta = 1.0f;
    }
    if (be->phase) be->phase(be, QLT_PHASE_LORA);
    lora_ws L = lora_prepare(be, sites, k, in, r, n, true);
    QLT_ASSERT(in * k3r * (int64_t)sizeof(float) <= (int64_t)impl->lora_acc_bytes);
    float *du = scratch; /* [n, k*r] */
    /* dY' = [dy_j... | T3] [tn, ld] in token chunks through the conversion workspace: T3 feeds dA too; when one
     * chunk holds every token, T3 is written there with du */
    bf16 *yp = (bf16 *)impl->conv;
    const int64_t chunk = (int64_t)(3 * QLT_CUDA_CONV_ELEMS * sizeof(float) / sizeof(bf16)) / ld;
    QLT_ASSERT(chunk > 0);
    const bool t3_done = lora_bwd_du_db(be, &L, sites, k, du, u, n, r, scale, n <= chunk ? yp + fold_rows : NULL, ld);
    /* W'' = [W_j...; A3] [ld, in]: the folded weights as bf16 with A3's rows after them (A3 alone: as it is) */
    if (be->phase) be->phase(be, QLT_PHASE_BWD_GEMM);
    const bf16 *wpp = L.a3;
    if (nf > 0) {
        int64_t rows;
        bf16 *stack = qlt_cuda_stack_bf16_room(be, folded, nf, k3r, &rows);
        CUDA_CHECK(cudaMemcpyAsync(stack + rows * in, L.a3, sizeof(bf16) * (size_t)(k3r * in), cudaMemcpyDeviceToDevice,
                                   s));
        wpp = stack;
    }
    const bwd_tokens bt = {yp, ld, chunk, wpp, fold_site, nf, true};
    lora_bwd_tokens(be, sites, k, &bt, du, t3_done, x, dx, dx_beta, n, in, r);
    /* the other wide outputs' GEMMs add onto dx (T3 is no longer needed when they use the conversion workspace) */
    if (!one_gradient)
        for (int j = 0; j < nw; j++)
            qlt_cuda_linear_bwd_x(be, dx, sites[wide_site[j]].dy, &w[wide_site[j]], 1, n, 1.0f);
    if (be->phase) be->phase(be, was);
}

/* ---- a group's forward with its adapters ----
 * A stack whose outputs are much wider than x (gate+up) folds the adapters into its one GEMM,
 * [x | u3] . [W | scale B3]^T: copying x [N, in] costs less than a second pass over y [N, sum rows]. Every other
 * group (q/k/v with their biases, o, down) writes the adapters' products first and has its frozen GEMMs add
 * onto them (beta 1: a read of y inside a compute-bound GEMM instead of a pass of its own). */

static bool fwd_folds(bool stacked, int k, int64_t in, int64_t rows) {
    return stacked && k > 1 && in * 4 <= rows; /* weight_stack_prepare made the room (model/lora.c) */
}

typedef struct fold_sites {
    const float *b[QLT_STACK_MAX]; /* [out_i, r] */
    int64_t out[QLT_STACK_MAX];
    int k;
} fold_sites;

/* Columns cols.. of W' [rows, ld]: the rows of site i get scale [bh | bl | bh] of B_i in the site's 3r
 * columns and 0 in every other site's (the adapters' block diagonal of the folded product). One thread a
 * (row, j < r): it writes element j of every site's three blocks of its row. */
static __global__ void fold_b_kernel(bf16 *wp, int64_t ld, int64_t cols, const __grid_constant__ fold_sites f, int r,
                              float scale) {
    int64_t rows = 0;
    for (int i = 0; i < f.k; i++) rows += f.out[i];
    const int64_t total = rows * r;
    const bf16 zero = __float2bfloat16(0.0f);
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = idx / r;
        const int j = (int)(idx - row * r);
        int owner = 0;
        int64_t local = row;
        while (local >= f.out[owner]) local -= f.out[owner++];
        const float x = scale * f.b[owner][local * r + j];
        const bf16 hi = __float2bfloat16(x), lo = __float2bfloat16(x - __bfloat162float(hi));
        bf16 *o = wp + row * ld + cols + j;
        for (int site = 0; site < f.k; site++, o += 3 * r) {
            const bool own = site == owner;
            o[0] = own ? hi : zero;
            o[r] = own ? lo : zero;
            o[2 * r] = own ? hi : zero;
        }
    }
}

void qlt_cuda_linear_lora_fwd(qlt_backend *be, void *y, float *u, const void *x, const qlt_weight *const *w, int k,
                              const float *const *bias, const qlt_lora_site *sites, int64_t n, int r, float scale) {
    if (n <= 0) return;
    cuda_impl *impl = cuda_impl_of(be);
    cudaStream_t s = impl->stream;
    const int64_t in = w[0]->cols, kr = (int64_t)k * r, ld = in + 3 * kr;
    const qlt_phase was = impl->phase; /* the frozen GEMMs are the caller's; u and the operands are LoRA's */
    int64_t rows = qlt_stack_rows(w, k);
    if (!fwd_folds(y != NULL, k, in, rows)) {
        /* the adapters' products written first (y_i = scale u_i B_i^T), the frozen GEMMs adding onto them */
        if (be->phase) be->phase(be, QLT_PHASE_LORA);
        lora_fwd_onto(be, sites, k, u, x, n, in, r, scale, 0.0f);
        if (be->phase) be->phase(be, was);
        if (y) {
            qlt_cuda_linear_fwd_onto(be, y, x, w, k, NULL, n, 1.0f);
        } else {
            for (int i = 0; i < k; i++)
                qlt_cuda_linear_fwd_onto(be, sites[i].y, x, &w[i], 1, bias ? bias[i] : NULL, n, 1.0f);
        }
        return;
    }
    if (be->phase) be->phase(be, QLT_PHASE_LORA);
    lora_ws L = lora_prepare(be, sites, k, in, r, n, false /* the fold reads B itself */);
    /* X' = [x | per site (ul uh uh)] goes through the conversion workspace in token chunks; when one chunk
     * holds every token, u's T3 is written there with u */
    bf16 *xp = (bf16 *)impl->conv;
    const int64_t chunk = (int64_t)(3 * QLT_CUDA_CONV_ELEMS * sizeof(float) / sizeof(bf16)) / ld;
    QLT_ASSERT(chunk > 0);
    const bool one_chunk = n <= chunk;
    lora_u(be, &L, u, x, n, in, r, k, one_chunk ? xp + in : NULL, ld);
    if (be->phase) be->phase(be, was);
    /* W' = [W_0; ...; W_k-1 | scale B3 block diagonal] */
    int64_t ldw = ld; /* the stack's stride: ld, or more in a weight_cache.cu entry */
    bf16 *wp = (bf16 *)qlt_cuda_stack_bf16(be, w, k, &ldw, &rows);
    fold_sites f;
    f.k = k;
    for (int i = 0; i < k; i++) f.b[i] = sites[i].b, f.out[i] = sites[i].out;
    fold_b_kernel<<<qlt_grid(rows * r, 256), 256, 0, s>>>(wp, ldw, in, f, r, scale);
    CUDA_CHECK_LAUNCH();
    /* one GEMM a token chunk */
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        int64_t tn = n - t0 < chunk ? n - t0 : chunk;
        qlt_cuda_copy_rows(s, xp, ld, (const bf16 *)x + t0 * in, in, tn, in);
        if (!one_chunk) split3(s, xp + in, ld, u + t0 * kr, tn, r, k);
        qlt_cuda_gemm(be, 0, 1, tn, rows, ld, 1.0f, xp, CUDA_R_16BF, ld, wp, CUDA_R_16BF, ldw, 0.0f,
                      (bf16 *)y + t0 * rows, CUDA_R_16BF, rows);
    }
}
