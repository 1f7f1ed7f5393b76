/* attention.cu: fused causal grouped-query attention with packed-example masking (flash-attention 2
 * style), forward and backward, bf16 in / out, fp32 accumulation on tensor cores (mma.sync m16n8k16).
 * Query t of a row attends keys j of the same row with seg_start[t] <= j <= t; the S x S score matrix
 * is never stored, only lse = log-sum-exp of the scaled scores per (token, head).
 *
 * Layouts: q/out/dq [B*S, n_heads*HD], k/v/dk/dv [B*S, n_kv*HD]; query head h reads kv head
 * h / (n_heads / n_kv). Tiles live in shared memory row-major with rows padded by 8 bf16 (16 bytes),
 * which makes both the 32-bit fragment loads and ldmatrix conflict-free.
 *
 * Forward   (grid: heads x batch x query tiles of 128, longest tiles first; 4 warps x 32 query rows, so
 *           each K / V fragment read from shared memory feeds two m16 row tiles): Q stays in shared
 *           memory; for each key tile of 64 from the tile's smallest seg_start (whole tiles before it are
 *           skipped) to its last query: S = Q K^T, mask, online softmax (exp2, running max and sum per
 *           row), O += P V with P reused from the S accumulators as the A operand.
 * Backward  D = rowsum(dO * O) (one warp per row) into the caller's scratch, then either the one-pass
 *           backward of attention_bwd_fused.cu (head_dim 64 and 128: dQ accumulated with fp32 atomics,
 *           so its last bits depend on the CTA order) or, with be->deterministic (train.deterministic)
 *           or other head dims, two kernels with no atomics (deterministic): dK/dV (grid: kv heads, or
 *           query heads with GQA, x batch x key tiles of 64; each warp owns 16 keys and accumulates over
 *           the query tiles that can see it) and dQ (grid like the forward; recomputes P and dP per key
 *           tile).
 *
 * The mma / ldmatrix / cp.async helpers and the fragment layouts are in attention_tiles.h. B from a
 * row-major [n][k] tile (K for S = Q K^T) is ldb_pair; B from a row-major [k][n] tile (V for O = P V)
 * is ldmatrix.x4.trans, which yields the B fragments of two adjacent n8 tiles. */
#include "common/env.h"
#include "cuda/attention_bwd_fused.h"
#include "cuda/attention_cudnn.h"
#include "cuda/attention_tiles.h"
#include "cuda/backend_cuda.h"

/* Pipelines: STAGES = 2 double-buffers the streamed tiles (the next tile's cp.async is in flight while
 * the current one is multiplied); STAGES = 1 would load then compute. The launchers instantiate 2. Every
 * iteration commits exactly one group (possibly empty), so wait_group<STAGES - 1> always means "the current
 * tile has landed". */

template <int HD> struct att_cfg {
    static constexpr int LD = HD + 8;
    static constexpr int BM_KV = HD >= 128 ? 32 : 64; /* query tile of the dK/dV kernel */
    static constexpr int BN_Q = HD >= 128 ? 32 : 64;  /* key tile of the dQ kernel */
    static constexpr int FWD_BM = 128;                /* query tile of the forward: 4 warps x 32 rows */
    /* Q, then K and V a stage each (STAGES 2: 104 KiB at head_dim 128, above Ada's 99 KiB, where 1 stage runs) */
    template <int STAGES> static constexpr size_t fwd_smem() { return (size_t)(FWD_BM + 2 * STAGES * 64) * LD * sizeof(bf16); }
    static constexpr size_t dq_smem = (size_t)4 * BN_Q * LD * sizeof(bf16);
    static constexpr size_t kv_smem = (size_t)(2 * 64 + 4 * BM_KV) * LD * sizeof(bf16) + 6 * BM_KV * sizeof(float);
};

/* acc [16 MT x HD] += C [16 MT x K] . X [K x HD] for MT m16 row tiles: C given as the fp32 accumulators of
 * K/8 n8 tiles per row tile (rounded to bf16 here and reused as the A operand), X a row-major [K][HD] smem
 * tile (B read with ldmatrix.trans once for every row tile) */
template <int HD, int K, int MT>
static __device__ __forceinline__ void mma_acc_tiles(float acc[MT][HD / 8][4], const float c[MT][K / 8][4],
                                                     const bf16 *X, int lane) {
#pragma unroll
    for (int j = 0; j < K / 16; j++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mi = 0; mi < MT; mi++) {
            a[mi][0] = pack_bf16(c[mi][2 * j][0], c[mi][2 * j][1]);
            a[mi][1] = pack_bf16(c[mi][2 * j][2], c[mi][2 * j][3]);
            a[mi][2] = pack_bf16(c[mi][2 * j + 1][0], c[mi][2 * j + 1][1]);
            a[mi][3] = pack_bf16(c[mi][2 * j + 1][2], c[mi][2 * j + 1][3]);
        }
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt += 2) {
            uint32_t bx[4];
            ldsm_x4_trans(bx, X, HD + 8, j * 16, dt * 8, lane);
#pragma unroll
            for (int mi = 0; mi < MT; mi++) {
                mma16816(acc[mi][dt], a[mi], bx[0], bx[1]);
                mma16816(acc[mi][dt + 1], a[mi], bx[2], bx[3]);
            }
        }
    }
}

/* one row tile: acc [16 x HD] += C [16 x K] . X [K x HD] */
template <int HD, int K>
static __device__ __forceinline__ void mma_acc_tile(float acc[HD / 8][4], const float c[K / 8][4], const bf16 *X,
                                                    int lane) {
    mma_acc_tiles<HD, K, 1>(reinterpret_cast<float(*)[HD / 8][4]>(acc), reinterpret_cast<const float(*)[K / 8][4]>(c), X,
                            lane);
}

/* Streaming K / V tiles of BN rows through two buffers each ([2][BN * (HD + 8)]): kv_prologue starts the
 * first tile (STAGES 2), kv_stage (at the top of each iteration) starts the next one and waits for the
 * current one, then barriers; returns the buffer index to read. */
template <int HD, int BN, int STAGES>
static __device__ __forceinline__ void kv_prologue(bf16 *Kbuf, bf16 *Vbuf, const bf16 *kb, const bf16 *vb, int64_t ks,
                                                   int n_begin, int last, int seq) {
    if (STAGES != 2) return;
    if (n_begin <= last) {
        load_tile_async<HD, BN>(Kbuf, kb, ks, n_begin, seq);
        load_tile_async<HD, BN>(Vbuf, vb, ks, n_begin, seq);
    }
    cp_async_commit();
}

template <int HD, int BN, int STAGES>
static __device__ __forceinline__ int kv_stage(bf16 *Kbuf, bf16 *Vbuf, const bf16 *kb, const bf16 *vb, int64_t ks,
                                               int n0, int last, int seq, int it) {
    constexpr int TILE = BN * (HD + 8);
    const int cur = STAGES == 2 ? (it & 1) : 0;
    if (STAGES == 2) {
        if (n0 + BN <= last) {
            load_tile_async<HD, BN>(Kbuf + (cur ^ 1) * TILE, kb, ks, n0 + BN, seq);
            load_tile_async<HD, BN>(Vbuf + (cur ^ 1) * TILE, vb, ks, n0 + BN, seq);
        }
    } else {
        load_tile_async<HD, BN>(Kbuf, kb, ks, n0, seq);
        load_tile_async<HD, BN>(Vbuf, vb, ks, n0, seq);
    }
    cp_async_commit();
    cp_async_wait<STAGES - 1>();
    __syncthreads();
    return cur;
}

/* ================================ forward ================================ */

template <int HD, int STAGES>
static __global__ void __launch_bounds__(ATT_THREADS, 2) attn_fwd_kernel(bf16 *out, float *lse, const bf16 *q,
                                                                      const bf16 *k, const bf16 *v,
                                                                      const int32_t *seg_start, int seq, int n_heads,
                                                                      int n_kv, float scale) {
    constexpr int BM = att_cfg<HD>::FWD_BM, BN = 64, LD = HD + 8, TILE = BN * LD;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Qs = (bf16 *)att_smem, *Kbuf = Qs + BM * LD, *Vbuf = Kbuf + STAGES * TILE; /* Q [BM][LD]; K, V [STAGES][TILE] */
    __shared__ int s_seg[BM];

    /* grid (heads, batch, query tiles): CTAs start in linear-index order, so every head's longest (last)
     * query tiles start first and the shortest fill the tail */
    const int m0 = (gridDim.z - 1 - blockIdx.z) * BM;
    const int h = blockIdx.x, b = blockIdx.y;
    const int kvh = h / (n_heads / n_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t qs = (int64_t)n_heads * HD, ks = (int64_t)n_kv * HD;
    const bf16 *qb = q + (int64_t)b * seq * qs + (int64_t)h * HD;
    const bf16 *kb = k + (int64_t)b * seq * ks + (int64_t)kvh * HD;
    const bf16 *vb = v + (int64_t)b * seq * ks + (int64_t)kvh * HD;
    const int32_t *segb = seg_start + (int64_t)b * seq;

    for (int i = threadIdx.x; i < BM; i += ATT_THREADS) s_seg[i] = m0 + i < seq ? segb[m0 + i] : INT_MAX;
    load_tile_async<HD, BM>(Qs, qb, qs, m0, seq); /* its own group: landed with the first K / V tile */
    cp_async_commit();
    __syncthreads();
    const int minseg = warp_min_seg(s_seg, BM);
    /* this warp's rows: m0 + r0 + 16 mi + 8 hf + g for row tiles mi and halves hf */
    const int r0 = warp * 32;
    int row[2][2], seg[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            row[mi][hf] = m0 + r0 + mi * 16 + hf * 8 + g;
            seg[mi][hf] = s_seg[r0 + mi * 16 + hf * 8 + g];
        }
    const int last = min(m0 + BM - 1, seq - 1), warp_last = min(m0 + r0 + 31, seq - 1);
    const int n_begin = (minseg / BN) * BN;
    const float sl2 = scale * 1.4426950408889634f;

    float o[2][HD / 8][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int i = 0; i < HD / 8; i++) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.0f;
    float mrow[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}}, lrow[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};

    kv_prologue<HD, BN, STAGES>(Kbuf, Vbuf, kb, vb, ks, n_begin, last, seq);
    int it = 0;
    for (int n0 = n_begin; n0 <= last; n0 += BN, it++) {
        const int cur = kv_stage<HD, BN, STAGES>(Kbuf, Vbuf, kb, vb, ks, n0, last, seq, it);
        const bf16 *Ks = Kbuf + cur * TILE, *Vs = Vbuf + cur * TILE;
        if (n0 <= warp_last) { /* else every key of the tile is after this warp's rows (warp-uniform) */
            float s[2][BN / 8][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++) s[mi][nt][0] = s[mi][nt][1] = s[mi][nt][2] = s[mi][nt][3] = 0.0f;
            /* S = Q K^T: each K fragment feeds both row tiles */
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                uint32_t qa[2][4];
                lda_frag(qa[0], Qs, LD, r0, kk * 16, lane);
                lda_frag(qa[1], Qs, LD, r0 + 16, kk * 16, lane);
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt += 2) {
                    uint32_t kb2[4];
                    ldb_pair(kb2, Ks, LD, nt * 8, kk * 16, lane);
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
                        mma16816(s[mi][nt], qa[mi], kb2[0], kb2[1]);
                        mma16816(s[mi][nt + 1], qa[mi], kb2[2], kb2[3]);
                    }
                }
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                /* mask unless every key of the tile is visible to both of this thread's rows of the tile */
                if (!(n0 + BN - 1 <= row[mi][0] && n0 >= seg[mi][0] && n0 >= seg[mi][1])) {
#pragma unroll
                    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int j = n0 + nt * 8 + 2 * t + (e & 1);
                            if (j > row[mi][e >> 1] || j < seg[mi][e >> 1]) s[mi][nt][e] = -INFINITY;
                        }
                }
                /* online softmax, rows g (half 0) and g + 8 (half 1) of the row tile */
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    float mx = mrow[mi][hf];
#pragma unroll
                    for (int nt = 0; nt < BN / 8; nt++) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * hf], s[mi][nt][2 * hf + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float mu = mx == -INFINITY ? 0.0f : mx * sl2;
                    const float alpha = fast_exp2(mrow[mi][hf] * sl2 - mu); /* 0 when the old max was -inf */
                    mrow[mi][hf] = mx;
                    float rs = 0.0f;
#pragma unroll
                    for (int nt = 0; nt < BN / 8; nt++) {
                        const float p0 = fast_exp2(s[mi][nt][2 * hf] * sl2 - mu);
                        const float p1 = fast_exp2(s[mi][nt][2 * hf + 1] * sl2 - mu);
                        s[mi][nt][2 * hf] = p0;
                        s[mi][nt][2 * hf + 1] = p1;
                        rs += p0 + p1;
                    }
                    lrow[mi][hf] = lrow[mi][hf] * alpha + rs;
#pragma unroll
                    for (int dt = 0; dt < HD / 8; dt++) {
                        o[mi][dt][2 * hf] *= alpha;
                        o[mi][dt][2 * hf + 1] *= alpha;
                    }
                }
            }
            mma_acc_tiles<HD, BN, 2>(o, s, Vs, lane); /* O += P V: each V fragment feeds both row tiles */
        }
        __syncthreads(); /* this buffer is refilled by the next iteration's prefetch */
    }
    cp_async_wait<0>();
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float l = lrow[mi][hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int i = row[mi][hf];
            if (i >= seq) continue;
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            bf16 *orow = out + ((int64_t)b * seq + i) * qs + (int64_t)h * HD;
#pragma unroll
            for (int dt = 0; dt < HD / 8; dt++)
                *(uint32_t *)(orow + dt * 8 + 2 * t) = pack_bf16(o[mi][dt][2 * hf] * inv, o[mi][dt][2 * hf + 1] * inv);
            if (t == 0) lse[((int64_t)b * seq + i) * n_heads + h] = mrow[mi][hf] * scale + logf(l);
        }
}

/* ================================ backward ================================ */

/* D[r] = sum_e dO[r, e] O[r, e] over rows r of [rows, hd] (token-major, heads inner): TPR = hd / 8 threads a
 * row, 8 values (16 bytes of each) a thread, the row's partial sums combined by shuffles within its lanes */
template <int TPR>
static __global__ void attn_bwd_dot_vec_kernel(float *dsum, const bf16 *dout, const bf16 *out, int64_t rows) {
    const int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / TPR;
    const int e = (threadIdx.x % TPR) * 8;
    float acc = 0.0f;
    if (r < rows) {
        float a[8], o[8];
        qlt_bf16x8_unpack(*(const uint4 *)(dout + r * TPR * 8 + e), a);
        qlt_bf16x8_unpack(*(const uint4 *)(out + r * TPR * 8 + e), o);
#pragma unroll
        for (int i = 0; i < 8; i++) acc += a[i] * o[i];
    }
#pragma unroll
    for (int sh = TPR / 2; sh > 0; sh >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, sh);
    if (r < rows && e == 0) dsum[r] = acc;
}

/* the same, a warp a row, for any hd (16, 32, 96) */
static __global__ void attn_bwd_dot_kernel(float *dsum, const bf16 *dout, const bf16 *out, int64_t rows, int hd) {
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const bf16 *a = dout + r * hd, *o = out + r * hd;
    float acc = 0.0f;
    for (int e = 2 * lane; e < hd; e += 64) {
        float2 x = __bfloat1622float2(*(const __nv_bfloat162 *)(a + e));
        float2 y = __bfloat1622float2(*(const __nv_bfloat162 *)(o + e));
        acc += x.x * y.x + x.y * y.y;
    }
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) dsum[r] = acc;
}

/* dK, dV for one key tile of 64 (4 warps x 16 keys), one batch row, and either one kv head (PER_HEAD false:
 * the streamed tiles are (query head of the group, query tile) pairs, flattened so the pipeline runs across
 * heads; bf16 dK/dV out) or one query head (PER_HEAD true: blockIdx.x is the query head, so a GQA group's
 * heads run in parallel CTAs; bf16 per-head partials out, summed per group by attn_group_sum_kernel). */
template <int HD, int STAGES, bool PER_HEAD>
static __global__ void __launch_bounds__(ATT_THREADS) attn_bwd_dkdv_kernel(bf16 *dk, bf16 *dv, bf16 *pdk, bf16 *pdv,
                                                                           const bf16 *dout,
                                                                           const float *lse, const float *dsum,
                                                                           const bf16 *q, const bf16 *k, const bf16 *v,
                                                                           const int32_t *seg_start, int seq,
                                                                           int n_heads, int n_kv, float scale) {
    constexpr int BN = 64, BM = att_cfg<HD>::BM_KV, LD = HD + 8, QT = BM * LD;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Ks = (bf16 *)att_smem, *Vs = Ks + BN * LD, *Qbuf = Vs + BN * LD, *dObuf = Qbuf + 2 * QT;
    float *s_lse2 = (float *)(dObuf + 2 * QT), *s_D = s_lse2 + 2 * BM; /* [2][BM] each */
    int *s_seg = (int *)(s_D + 2 * BM);                                 /* [2][BM] */

    /* grid (heads, batch, key tiles): the first key tiles have the most queries, and every head's start first */
    const int n0 = blockIdx.z * BN;
    const int b = blockIdx.y, group = n_heads / n_kv;
    const int kvh = PER_HEAD ? (int)blockIdx.x / group : (int)blockIdx.x;
    const int head0 = PER_HEAD ? (int)blockIdx.x : kvh * group, heads_here = PER_HEAD ? 1 : group;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t qs = (int64_t)n_heads * HD, ks = (int64_t)n_kv * HD;
    const int64_t row_base = (int64_t)b * seq;
    const int32_t *segb = seg_start + row_base;
    const float sl2 = scale * 1.4426950408889634f;
    const int m_start = (n0 / BM) * BM; /* causal: no query before the first key sees it */
    const int n_mtiles = (seq - m_start + BM - 1) / BM, n_items = heads_here * n_mtiles;

    load_tile_async<HD, BN>(Ks, k + row_base * ks + (int64_t)kvh * HD, ks, n0, seq);
    load_tile_async<HD, BN>(Vs, v + row_base * ks + (int64_t)kvh * HD, ks, n0, seq);
    cp_async_commit();
    const int kr0 = warp * 16;
    const int key_a = n0 + kr0 + g, key_b = key_a + 8;
    const int n_last = min(n0 + BN - 1, seq - 1);

    /* item -> (query head, query tile); issue its loads into buffer `buf` */
    auto issue = [&](int item, int buf) {
        const int h = head0 + item / n_mtiles, m0 = m_start + (item % n_mtiles) * BM;
        load_tile_async<HD, BM>(Qbuf + buf * QT, q + row_base * qs + (int64_t)h * HD, qs, m0, seq);
        load_tile_async<HD, BM>(dObuf + buf * QT, dout + row_base * qs + (int64_t)h * HD, qs, m0, seq);
        for (int i = threadIdx.x; i < BM; i += ATT_THREADS) {
            int qi = m0 + i;
            bool ok = qi < seq;
            s_seg[buf * BM + i] = ok ? segb[qi] : INT_MAX;
            s_lse2[buf * BM + i] = ok ? lse[(row_base + qi) * n_heads + h] * 1.4426950408889634f : 0.0f;
            s_D[buf * BM + i] = ok ? dsum[(row_base + qi) * n_heads + h] : 0.0f;
        }
    };

    float dka[HD / 8][4], dva[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dka[i][e] = dva[i][e] = 0.0f;

    if (STAGES == 2) {
        if (n_items > 0) issue(0, 0);
        cp_async_commit();
    }
    for (int item = 0; item < n_items; item++) {
        const int cur = STAGES == 2 ? (item & 1) : 0;
        if (STAGES == 2) {
            if (item + 1 < n_items) issue(item + 1, cur ^ 1);
        } else {
            issue(item, 0);
        }
        cp_async_commit();
        cp_async_wait<STAGES - 1>();
        __syncthreads();
        const int m0 = m_start + (item % n_mtiles) * BM;
        const bf16 *Qs = Qbuf + cur * QT, *dOs = dObuf + cur * QT;
        const int *tseg = s_seg + cur * BM;
        const float *tlse2 = s_lse2 + cur * BM, *tD = s_D + cur * BM;
        if (warp_min_seg(tseg, BM) <= n_last) { /* else no query of this tile sees our keys (block-uniform) */
            float st[BM / 8][4], dpt[BM / 8][4];
#pragma unroll
            for (int nt = 0; nt < BM / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) st[nt][e] = dpt[nt][e] = 0.0f;
            /* S^T = K Q^T and dP^T = V dO^T for our 16 keys x BM queries */
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                uint32_t ka[4], va[4];
                lda_frag(ka, Ks, LD, kr0, kk * 16, lane);
                lda_frag(va, Vs, LD, kr0, kk * 16, lane);
#pragma unroll
                for (int nt = 0; nt < BM / 8; nt += 2) {
                    uint32_t qb[4], db[4];
                    ldb_pair(qb, Qs, LD, nt * 8, kk * 16, lane);
                    ldb_pair(db, dOs, LD, nt * 8, kk * 16, lane);
                    mma16816(st[nt], ka, qb[0], qb[1]);
                    mma16816(st[nt + 1], ka, qb[2], qb[3]);
                    mma16816(dpt[nt], va, db[0], db[1]);
                    mma16816(dpt[nt + 1], va, db[2], db[3]);
                }
            }
            /* P^T and dS^T = P^T (dP^T - D); the per-query statistics of this thread's 2 BM/8 queries
             * read once; no mask tests when every query of the tile sees both of this thread's keys */
            float ql2[BM / 4], qd[BM / 4];
#pragma unroll
            for (int c = 0; c < BM / 4; c++) {
                int ci = (c >> 1) * 8 + 2 * t + (c & 1);
                ql2[c] = tlse2[ci];
                qd[c] = tD[ci];
            }
            const bool full = key_b <= m0 && warp_max_seg(tseg, BM) <= key_a; /* tseg is INT_MAX beyond seq */
#pragma unroll
            for (int nt = 0; nt < BM / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = nt * 2 + (e & 1), ci = nt * 8 + 2 * t + (e & 1); /* query index in the tile */
                    bool ok = full;
                    if (!full) {
                        int kj = e < 2 ? key_a : key_b;
                        ok = kj <= m0 + ci && kj >= tseg[ci];
                    }
                    float p = ok ? fast_exp2(st[nt][e] * sl2 - ql2[c]) : 0.0f;
                    st[nt][e] = p;
                    dpt[nt][e] = p * (dpt[nt][e] - qd[c]);
                }
            mma_acc_tile<HD, BM>(dva, st, dOs, lane); /* dV += P^T dO (k = queries) */
            mma_acc_tile<HD, BM>(dka, dpt, Qs, lane); /* dK += dS^T Q */
        }
        __syncthreads(); /* this buffer is refilled by the next iteration's prefetch */
    }
    cp_async_wait<0>();
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int kj = hf ? key_b : key_a;
        if (kj >= seq) continue;
        if (PER_HEAD) {
            bf16 *pkr = pdk + (row_base + kj) * qs + (int64_t)head0 * HD, *pvr = pdv + (row_base + kj) * qs + (int64_t)head0 * HD;
#pragma unroll
            for (int dt = 0; dt < HD / 8; dt++) {
                *(uint32_t *)(pkr + dt * 8 + 2 * t) = pack_bf16(dka[dt][2 * hf] * scale, dka[dt][2 * hf + 1] * scale);
                *(uint32_t *)(pvr + dt * 8 + 2 * t) = pack_bf16(dva[dt][2 * hf], dva[dt][2 * hf + 1]);
            }
            continue;
        }
        bf16 *dkr = dk + (row_base + kj) * ks + (int64_t)kvh * HD, *dvr = dv + (row_base + kj) * ks + (int64_t)kvh * HD;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            *(uint32_t *)(dkr + dt * 8 + 2 * t) = pack_bf16(dka[dt][2 * hf] * scale, dka[dt][2 * hf + 1] * scale);
            *(uint32_t *)(dvr + dt * 8 + 2 * t) = pack_bf16(dva[dt][2 * hf], dva[dt][2 * hf + 1]);
        }
    }
}

/* dQ for one query tile of 64 (4 warps x 16 rows), one head, one batch row */
template <int HD, int STAGES>
static __global__ void __launch_bounds__(ATT_THREADS) attn_bwd_dq_kernel(bf16 *dq, const bf16 *dout, const float *lse,
                                                                         const float *dsum, const bf16 *q,
                                                                         const bf16 *k, const bf16 *v,
                                                                         const int32_t *seg_start, int seq, int n_heads,
                                                                         int n_kv, float scale) {
    constexpr int BM = 64, BN = att_cfg<HD>::BN_Q, LD = HD + 8, TILE = BN * LD;
    static_assert(2 * BN >= BM, "Q / dO are staged through two key buffers");
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Kbuf = (bf16 *)att_smem, *Vbuf = Kbuf + 2 * TILE; /* [2][TILE] each */
    __shared__ int s_seg[BM];

    const int m0 = (gridDim.z - 1 - blockIdx.z) * BM; /* grid (heads, batch, query tiles) as the forward's */
    const int h = blockIdx.x, b = blockIdx.y;
    const int kvh = h / (n_heads / n_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t qs = (int64_t)n_heads * HD, ks = (int64_t)n_kv * HD;
    const int64_t row_base = (int64_t)b * seq;
    const bf16 *kb = k + row_base * ks + (int64_t)kvh * HD, *vb = v + row_base * ks + (int64_t)kvh * HD;
    const int32_t *segb = seg_start + row_base;
    const float sl2 = scale * 1.4426950408889634f;

    if (threadIdx.x < BM) s_seg[threadIdx.x] = m0 + (int)threadIdx.x < seq ? segb[m0 + threadIdx.x] : INT_MAX;
    load_tile_async<HD, BM>(Kbuf, q + row_base * qs + (int64_t)h * HD, qs, m0, seq);
    load_tile_async<HD, BM>(Vbuf, dout + row_base * qs + (int64_t)h * HD, qs, m0, seq);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    const int minseg = warp_min_seg(s_seg, BM);
    const int r0 = warp * 16;
    uint32_t qa[HD / 16][4], doa[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        lda_frag(qa[kk], Kbuf, LD, r0, kk * 16, lane);
        lda_frag(doa[kk], Vbuf, LD, r0, kk * 16, lane);
    }
    const int row_a = m0 + r0 + g, row_b = row_a + 8;
    const int seg_a = s_seg[r0 + g], seg_b = s_seg[r0 + g + 8];
    const float lse2_a = row_a < seq ? lse[(row_base + row_a) * n_heads + h] * 1.4426950408889634f : 0.0f;
    const float lse2_b = row_b < seq ? lse[(row_base + row_b) * n_heads + h] * 1.4426950408889634f : 0.0f;
    const float d_a = row_a < seq ? dsum[(row_base + row_a) * n_heads + h] : 0.0f;
    const float d_b = row_b < seq ? dsum[(row_base + row_b) * n_heads + h] : 0.0f;
    __syncthreads(); /* Q / dO fragments read before the buffers are refilled */
    const int last = min(m0 + BM - 1, seq - 1);
    const int n_begin = (minseg / BN) * BN;

    float dqa[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.0f;

    kv_prologue<HD, BN, STAGES>(Kbuf, Vbuf, kb, vb, ks, n_begin, last, seq);
    int it = 0;
    for (int n0 = n_begin; n0 <= last; n0 += BN, it++) {
        const int cur = kv_stage<HD, BN, STAGES>(Kbuf, Vbuf, kb, vb, ks, n0, last, seq, it);
        const bf16 *Ks = Kbuf + cur * TILE, *Vs = Vbuf + cur * TILE;
        float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nt][e] = dp[nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt += 2) {
                uint32_t kb2[4], vb2[4];
                ldb_pair(kb2, Ks, LD, nt * 8, kk * 16, lane);
                ldb_pair(vb2, Vs, LD, nt * 8, kk * 16, lane);
                mma16816(s[nt], qa[kk], kb2[0], kb2[1]);
                mma16816(s[nt + 1], qa[kk], kb2[2], kb2[3]);
                mma16816(dp[nt], doa[kk], vb2[0], vb2[1]);
                mma16816(dp[nt + 1], doa[kk], vb2[2], vb2[3]);
            }
        /* no mask tests when every key of the tile is visible to both of this thread's rows */
        const bool full = n0 + BN - 1 <= row_a && n0 >= seg_a && n0 >= seg_b;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                bool ok = full;
                if (!full) {
                    int j = n0 + nt * 8 + 2 * t + (e & 1);
                    int i = e < 2 ? row_a : row_b, sg = e < 2 ? seg_a : seg_b;
                    ok = j <= i && j >= sg;
                }
                float p = ok ? fast_exp2(s[nt][e] * sl2 - (e < 2 ? lse2_a : lse2_b)) : 0.0f;
                s[nt][e] = p * (dp[nt][e] - (e < 2 ? d_a : d_b)); /* dS */
            }
        mma_acc_tile<HD, BN>(dqa, s, Ks, lane); /* dQ += dS K (k = keys) */
        __syncthreads(); /* this buffer is refilled by the next iteration's prefetch */
    }
    cp_async_wait<0>();
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int i = hf ? row_b : row_a;
        if (i >= seq) continue;
        bf16 *dqr = dq + (row_base + i) * qs + (int64_t)h * HD;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++)
            *(uint32_t *)(dqr + dt * 8 + 2 * t) = pack_bf16(dqa[dt][2 * hf] * scale, dqa[dt][2 * hf + 1] * scale);
    }
}

/* ================================ launchers ================================ */

static void attn_check_args(int n_heads, int n_kv_heads, const void *q, const void *k) {
    if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || (((uintptr_t)q | (uintptr_t)k) & 15) != 0) {
        fprintf(stderr, "qlora-train: attention: n_heads %d must be a multiple of n_kv_heads %d and q/k 16-byte "
                        "aligned\n", n_heads, n_kv_heads);
        abort();
    }
}

[[noreturn]] static void attn_bad_head_dim(int head_dim) {
    fprintf(stderr, "qlora-train: the CUDA attention supports head_dim 16, 32, 64, 96, 128 (got %d)\n", head_dim);
    abort();
}

template <int HD, int STAGES>
static void attn_fwd_launch(cudaStream_t s, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                            const int32_t *seg, int batch, int seq, int n_heads, int n_kv, float scale) {
    static bool attr = false;
    const size_t smem = att_cfg<HD>::template fwd_smem<STAGES>();
    attn_smem_attr(attn_fwd_kernel<HD, STAGES>, smem, &attr);
    dim3 grid(n_heads, batch, (seq + att_cfg<HD>::FWD_BM - 1) / att_cfg<HD>::FWD_BM);
    attn_fwd_kernel<HD, STAGES><<<grid, ATT_THREADS, smem, s>>>(out, lse, q, k, v, seg, seq, n_heads, n_kv, scale);
    CUDA_CHECK_LAUNCH();
}

/* two stages where the device's shared memory holds them, else one */
template <int HD>
static void attn_fwd_dispatch(qlt_backend *be, cudaStream_t s, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                              const bf16 *v, const int32_t *seg, int batch, int seq, int n_heads, int n_kv, float scale) {
    if (qlt_cuda_smem_fits(be, att_cfg<HD>::template fwd_smem<2>()))
        attn_fwd_launch<HD, 2>(s, out, lse, q, k, v, seg, batch, seq, n_heads, n_kv, scale);
    else
        attn_fwd_launch<HD, 1>(s, out, lse, q, k, v, seg, batch, seq, n_heads, n_kv, scale);
}

/* cuDNN's fused attention takes a call when cuDNN is loaded and the run's rows hold at most
 * QLT_FUSED_ATTENTION_MAX_ROW_EXAMPLES examples that matter (be->max_row_examples, set from the data): with 1, dense
 * causal attention over whole rows (the masking of a trailing example no loss is taken from changes no loss or
 * gradient); with more, the ragged layout, each example its own sequence. QLT_CUDNN_RAGGED=1 in the
 * environment takes the ragged layout for one example a row too (for measuring the two). A shape's forward
 * and backward always take the same side: the dense lse layout ([B, H, S]) is not the own kernels' ([B*S, H]). */
#ifdef QLT_HAVE_CUDNN
static qlt_cudnn_attn *attn_cudnn_for(qlt_backend *be, qlt_cudnn_attn_shape *sh, int batch, int seq, int n_heads,
                                      int n_kv, int hd, float scale) {
    const int most = be->max_row_examples;
    if (be->attention_own || most < 1 || most > QLT_FUSED_ATTENTION_MAX_ROW_EXAMPLES) return NULL;
    static int force_ragged = -1;
    if (force_ragged < 0) {
        force_ragged = qlt_env_flag(QLT_ENV_CUDNN_RAGGED);
    }
    *sh = (qlt_cudnn_attn_shape){batch, seq, n_heads, n_kv, hd, most == 1 && !force_ragged ? 0 : most,
                                 be->deterministic, scale};
    return cuda_impl_of(be)->cudnn;
}
#endif

int qlt_cuda_attention_plan(qlt_backend *be, int batch, int seq, int n_heads, int n_kv_heads, int head_dim,
                            float scale) {
#ifdef QLT_HAVE_CUDNN
    qlt_cudnn_attn_shape sh;
    qlt_cudnn_attn *a = attn_cudnn_for(be, &sh, batch, seq, n_heads, n_kv_heads, head_dim, scale);
    if (a && qlt_cudnn_attn_usable(a, &sh)) return sh.slots ? QLT_ATTENTION_FUSED_RAGGED : QLT_ATTENTION_FUSED_DENSE;
#endif
    return QLT_ATTENTION_OWN;
}

void qlt_cuda_attention_fwd(qlt_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                            const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads, int head_dim,
                            float scale) {
    if (batch <= 0 || seq <= 0) return;
    attn_check_args(n_heads, n_kv_heads, q, k);
#ifdef QLT_HAVE_CUDNN
    qlt_cudnn_attn_shape sh;
    qlt_cudnn_attn *dnn = attn_cudnn_for(be, &sh, batch, seq, n_heads, n_kv_heads, head_dim, scale);
    if (dnn && qlt_cudnn_attn_fwd(dnn, &sh, out, lse, q, k, v, seg_start)) return;
#endif
    cudaStream_t s = cuda_impl_of(be)->stream;
    bf16 *o = (bf16 *)out;
    const bf16 *qq = (const bf16 *)q, *kk = (const bf16 *)k, *vv = (const bf16 *)v;
    switch (head_dim) {
    case 16: attn_fwd_dispatch<16>(be, s, o, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    case 32: attn_fwd_dispatch<32>(be, s, o, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    case 64: attn_fwd_dispatch<64>(be, s, o, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    case 96: attn_fwd_dispatch<96>(be, s, o, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    case 128: attn_fwd_dispatch<128>(be, s, o, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    default: attn_bad_head_dim(head_dim);
    }
}

/* dk / dv [rows, n_kv, hd] (bf16) = fp32 sum over each GQA group's query heads of the bf16 partials
 * [rows, n_heads, hd], in head order (deterministic); 8 values (16 bytes) a thread (hd % 8 == 0) */
static __global__ void attn_group_sum_kernel(bf16 *dk, bf16 *dv, const bf16 *pdk, const bf16 *pdv, int64_t rows,
                                             int n_heads, int n_kv, int hd) {
    const int group = n_heads / n_kv, hd8 = hd / 8;
    const int64_t total = rows * n_kv * hd8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / ((int64_t)n_kv * hd8);
        const int rem = (int)(i - row * n_kv * hd8), kvh = rem / hd8, e8 = rem - kvh * hd8;
        const int64_t base = (row * n_heads + (int64_t)kvh * group) * hd8 + e8; /* in 8-value units */
        float sk[8] = {0}, sv[8] = {0}, x[8];
        for (int j = 0; j < group; j++) {
            qlt_bf16x8_unpack(((const uint4 *)pdk)[base + (int64_t)j * hd8], x);
#pragma unroll
            for (int e = 0; e < 8; e++) sk[e] += x[e];
            qlt_bf16x8_unpack(((const uint4 *)pdv)[base + (int64_t)j * hd8], x);
#pragma unroll
            for (int e = 0; e < 8; e++) sv[e] += x[e];
        }
        ((uint4 *)dk)[i] = qlt_bf16x8_pack(sk);
        ((uint4 *)dv)[i] = qlt_bf16x8_pack(sv);
    }
}

/* The CUDA backward's scratch, 256-byte aligned parts: D [N, n_heads] float; with GQA the bf16 per-head
 * dK and dV partials [N, n_heads, hd] each (rounded per head, then summed, as autograd does for Hugging
 * Face's repeat_kv); for the head dims of the one-pass backward its fp32 dQ
 * accumulator [N, n_heads, hd]. */
static size_t attn_partials_offset(int64_t n, int n_heads) {
    return ((size_t)n * (size_t)n_heads * sizeof(float) + 255) & ~(size_t)255;
}

static size_t attn_partials_bytes(int64_t n, int n_heads, int n_kv_heads, int head_dim) {
    return n_heads == n_kv_heads ? 0 : 2 * sizeof(bf16) * (size_t)n * (size_t)n_heads * (size_t)head_dim;
}

size_t qlt_cuda_attention_bwd_scratch_bytes(qlt_backend *be, int64_t n, int n_heads, int n_kv_heads, int head_dim) {
    size_t bytes = attn_partials_offset(n, n_heads) + attn_partials_bytes(n, n_heads, n_kv_heads, head_dim);
    if (qlt_attn_bwd_fused_supported(head_dim, be)) bytes += qlt_attn_bwd_fused_acc_bytes(n, n_heads, head_dim);
    return bytes;
}

template <int HD, int STAGES>
static void attn_bwd_launch(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, float *dsum, const bf16 *dout,
                            const float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *seg,
                            int batch, int seq, int n_heads, int n_kv, float scale) {
    static bool attr_kv = false, attr_kv_head = false, attr_q = false;
    const size_t kv_smem = att_cfg<HD>::kv_smem, q_smem = att_cfg<HD>::dq_smem;
    attn_smem_attr(attn_bwd_dq_kernel<HD, STAGES>, q_smem, &attr_q);
    if (n_heads == n_kv) {
        attn_smem_attr(attn_bwd_dkdv_kernel<HD, STAGES, false>, kv_smem, &attr_kv);
        dim3 gkv(n_kv, batch, (seq + 63) / 64);
        attn_bwd_dkdv_kernel<HD, STAGES, false><<<gkv, ATT_THREADS, kv_smem, s>>>(dk, dv, NULL, NULL, dout, lse, dsum, q,
                                                                                  k, v, seg, seq, n_heads, n_kv, scale);
    } else { /* GQA: one CTA per query head (group x more CTAs), partials summed per group */
        const int64_t rows = (int64_t)batch * seq;
        bf16 *pdk = (bf16 *)((char *)dsum + attn_partials_offset(rows, n_heads));
        bf16 *pdv = pdk + rows * n_heads * HD;
        attn_smem_attr(attn_bwd_dkdv_kernel<HD, STAGES, true>, kv_smem, &attr_kv_head);
        dim3 gkv(n_heads, batch, (seq + 63) / 64);
        attn_bwd_dkdv_kernel<HD, STAGES, true><<<gkv, ATT_THREADS, kv_smem, s>>>(dk, dv, pdk, pdv, dout, lse, dsum, q, k,
                                                                                 v, seg, seq, n_heads, n_kv, scale);
        CUDA_CHECK_LAUNCH();
        attn_group_sum_kernel<<<qlt_grid(rows * n_kv * HD / 8, 256), 256, 0, s>>>(dk, dv, pdk, pdv, rows, n_heads, n_kv, HD);
    }
    CUDA_CHECK_LAUNCH();
    dim3 gq(n_heads, batch, (seq + 63) / 64);
    attn_bwd_dq_kernel<HD, STAGES><<<gq, ATT_THREADS, q_smem, s>>>(dq, dout, lse, dsum, q, k, v, seg, seq, n_heads,
                                                                   n_kv, scale);
    CUDA_CHECK_LAUNCH();
}

template <int HD>
static void attn_bwd_dispatch(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, float *dsum, const bf16 *dout,
                              const float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *seg,
                              int batch, int seq, int n_heads, int n_kv, float scale) {
    attn_bwd_launch<HD, 2>(s, dq, dk, dv, dsum, dout, lse, q, k, v, seg, batch, seq, n_heads, n_kv, scale);
}

void qlt_cuda_attention_bwd(qlt_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                            const void *out, const float *lse, const void *q, const void *k, const void *v,
                            const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads, int head_dim,
                            float scale) {
    if (batch <= 0 || seq <= 0) return;
    attn_check_args(n_heads, n_kv_heads, q, k);
#ifdef QLT_HAVE_CUDNN
    qlt_cudnn_attn_shape sh;
    qlt_cudnn_attn *dnn = attn_cudnn_for(be, &sh, batch, seq, n_heads, n_kv_heads, head_dim, scale);
    if (dnn && qlt_cudnn_attn_bwd(dnn, &sh, dq, dk, dv, scratch,
                                  qlt_cuda_attention_bwd_scratch_bytes(be, (int64_t)batch * seq, n_heads, n_kv_heads,
                                                                       head_dim),
                                  dout, out, lse, q, k, v, seg_start))
        return;
#endif
    cudaStream_t s = cuda_impl_of(be)->stream;
    int64_t rows = (int64_t)batch * seq * n_heads;
    const bool vec = (((uintptr_t)dout | (uintptr_t)out) & 15) == 0;
    const unsigned vec_grid = (unsigned)((rows * (head_dim / 8) + 255) / 256);
    if (vec && head_dim == 64)
        attn_bwd_dot_vec_kernel<8><<<vec_grid, 256, 0, s>>>(scratch, (const bf16 *)dout, (const bf16 *)out, rows);
    else if (vec && head_dim == 128)
        attn_bwd_dot_vec_kernel<16><<<vec_grid, 256, 0, s>>>(scratch, (const bf16 *)dout, (const bf16 *)out, rows);
    else
        attn_bwd_dot_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, s>>>(scratch, (const bf16 *)dout, (const bf16 *)out,
                                                                        rows, head_dim);
    CUDA_CHECK_LAUNCH();
    bf16 *a = (bf16 *)dq, *bk = (bf16 *)dk, *c = (bf16 *)dv;
    const bf16 *d = (const bf16 *)dout, *qq = (const bf16 *)q, *kk = (const bf16 *)k, *vv = (const bf16 *)v;
    /* the one-pass backward (dQ by atomics; head dims 64 and 128) unless be->deterministic: it leaves GQA's dK / dV
     * as per-head partials that the group sum adds up */
    if (qlt_attn_bwd_fused_supported(head_dim, be) && !be->deterministic) {
        const int64_t n = (int64_t)batch * seq;
        char *part = (char *)scratch + attn_partials_offset(n, n_heads);
        bf16 *pdk = (bf16 *)part, *pdv = pdk + n * n_heads * head_dim;
        float *acc = (float *)(part + attn_partials_bytes(n, n_heads, n_kv_heads, head_dim));
        qlt_attn_bwd_fused(s, a, bk, c, acc, pdk, pdv, scratch, d, lse, qq, kk, vv, seg_start, batch, seq, n_heads,
                           n_kv_heads, head_dim, scale);
        if (n_heads != n_kv_heads) {
            attn_group_sum_kernel<<<qlt_grid(n * n_kv_heads * head_dim / 8, 256), 256, 0, s>>>(bk, c, pdk, pdv, n, n_heads,
                                                                                           n_kv_heads, head_dim);
            CUDA_CHECK_LAUNCH();
        }
        return;
    }
    switch (head_dim) {
    case 16: attn_bwd_dispatch<16>(s, a, bk, c, scratch, d, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    case 32: attn_bwd_dispatch<32>(s, a, bk, c, scratch, d, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    case 64: attn_bwd_dispatch<64>(s, a, bk, c, scratch, d, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    case 96: attn_bwd_dispatch<96>(s, a, bk, c, scratch, d, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    case 128: attn_bwd_dispatch<128>(s, a, bk, c, scratch, d, lse, qq, kk, vv, seg_start, batch, seq, n_heads, n_kv_heads, scale); break;
    default: attn_bad_head_dim(head_dim);
    }
}
