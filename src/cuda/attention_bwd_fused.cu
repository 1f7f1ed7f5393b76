/* attention_bwd_fused.cu: the attention backward in one pass over (key tile, query tile) pairs, flash-attention
 * 2 style. The two-kernel backward in attention.cu recomputes S and dP in its dQ kernel (7 tile products per
 * pair); here each pair's S and dP are computed once and feed dV, dK and dQ (5 products), and the warp tiles
 * are 32 x 32 instead of 16 x 32, so each fragment loaded from shared memory feeds more tensor-core work.
 * dK and dV accumulate in registers; dQ is accumulated over key tiles in an fp32 buffer with vector atomic
 * adds, then scaled and rounded to bf16 once. The atomics' order varies from run to run, so dQ's last bits do
 * too (flash-attention's backward has the same property); train.deterministic (be->deterministic) selects
 * the two-kernel backward, which is bitwise reproducible.
 *
 * CTA: 8 warps, one batch row, one query head, keys n0..n0+127 (K and V tiles resident in shared memory);
 * it streams the query tiles of 64 that can see those keys (causal: from n0 on), double-buffering Q, dO and
 * their per-query statistics (lse, D = rowsum(dO * O), seg_start), all with cp.async. Per query tile:
 *   1. S^T = K Q^T, dP^T = V dO^T            [128 keys x 64 queries]; warp: 32 keys x 32 queries
 *   2. P^T = exp2((S^T * scale - lse) * log2e), masked (causal, packed segments); dS^T = P^T (dP^T - D);
 *      both rounded to bf16 into shared memory [128][64 + 8]
 *   3. dV += P^T dO, dK += dS^T Q              [128 keys x HD], k = 64 queries; warp: 32 keys x HD/2
 *   4. dQ_acc += dS K                           [64 queries x HD], k = 128 keys; warp: 32 queries x HD/4
 * With GQA each query head's dK / dV are written as bf16 partials [B*S, n_heads, HD] that attention.cu sums
 * per group in fp32 (deterministically; as autograd sums the bf16 gradients of Hugging Face's repeat_kv);
 * without GQA they are written as bf16 directly. */
#include "cuda/attention_bwd_fused.h"
#include "cuda/attention_tiles.h"

#define FUSED_THREADS 256

template <int HD> struct fused_cfg {
    static constexpr int BN = 128; /* keys of a CTA */
    static constexpr int BM = 64;  /* queries of a streamed tile */
    static constexpr int LD = HD + 8, LDP = BM + 8, QT = BM * LD;
    /* K, V [BN][LD]; Q, dO [2][BM][LD]; P^T, dS^T [BN][LDP]; lse, D, seg [2][BM] */
    static constexpr size_t smem =
        (size_t)(2 * BN * LD + 4 * QT + 2 * BN * LDP) * sizeof(bf16) + (size_t)6 * BM * sizeof(float);
};

/* p[0] += a, p[1] += b (global fp32, 8-byte aligned): one vector reduction on sm_90 */
static __device__ __forceinline__ void red_add2(float *p, float a, float b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

template <int HD, bool PER_HEAD>
static __global__ void __launch_bounds__(FUSED_THREADS, 1)
    attn_bwd_fused_kernel(float *dq_acc, bf16 *dk, bf16 *dv, bf16 *pdk, bf16 *pdv, const bf16 *dout,
                          const float *lse, const float *dsum, const bf16 *q, const bf16 *k, const bf16 *v,
                          const int32_t *seg_start, int seq, int n_heads, int n_kv, float scale, int batch) {
    using C = fused_cfg<HD>;
    constexpr int BN = C::BN, BM = C::BM, LD = C::LD, LDP = C::LDP, QT = C::QT;
    constexpr int NH = HD / 16; /* n8 tiles of a warp's half of the head dim (dK, dV) */
    constexpr int NQ = HD / 32; /* n8 tiles of a warp's quarter of the head dim (dQ) */
    static_assert(BN % BM == 0 && NQ % 2 == 0, "tile shapes");
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Ks = (bf16 *)att_smem, *Vs = Ks + BN * LD, *Qbuf = Vs + BN * LD, *dObuf = Qbuf + 2 * QT;
    bf16 *Ps = dObuf + 2 * QT, *dSs = Ps + BN * LDP; /* P^T, dS^T: [BN keys][BM queries] */
    float *s_lse = (float *)(dSs + BN * LDP), *s_D = s_lse + 2 * BM;
    int *s_seg = (int *)(s_D + 2 * BM);

    /* a 1-D grid, key tile slowest: CTAs start in index order, so the first key tiles (the most query
     * tiles) of every head and row start first and the shortest fill the tail */
    const int hb = n_heads * batch, tile = blockIdx.x / hb, h = blockIdx.x % n_heads, b = (blockIdx.x % hb) / n_heads;
    const int n0 = tile * BN, kvh = h / (n_heads / n_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t qs = (int64_t)n_heads * HD, ks = (int64_t)n_kv * HD;
    const int64_t row_base = (int64_t)b * seq;
    const int32_t *segb = seg_start + row_base;
    const float sl2 = scale * 1.4426950408889634f;
    const int n_items = (seq - n0 + BM - 1) / BM; /* query tiles from n0 (causal) to the end */
    const int n_last = min(n0 + BN - 1, seq - 1);
    /* warp roles: S^T / dP^T and dK / dV rows (keys) kr0..kr0+31; S^T columns (queries) qc0..qc0+31; dK / dV
     * columns hc0..hc0+HD/2-1; dQ rows (queries) dr0..dr0+31 and columns dc0..dc0+HD/4-1 */
    const int kr0 = (warp >> 1) * 32, qc0 = (warp & 1) * 32, hc0 = (warp & 1) * (HD / 2);
    const int dr0 = (warp >> 2) * 32, dc0 = (warp & 3) * (HD / 4);

    load_tile_async<HD, BN, FUSED_THREADS>(Ks, k + row_base * ks + (int64_t)kvh * HD, ks, n0, seq);
    load_tile_async<HD, BN, FUSED_THREADS>(Vs, v + row_base * ks + (int64_t)kvh * HD, ks, n0, seq);

    /* query tile `item` (queries n0 + 64 item ..) into buffer `buf` */
    auto issue = [&](int item, int buf) {
        const int m0 = n0 + item * BM;
        load_tile_async<HD, BM, FUSED_THREADS>(Qbuf + buf * QT, q + row_base * qs + (int64_t)h * HD, qs, m0, seq);
        load_tile_async<HD, BM, FUSED_THREADS>(dObuf + buf * QT, dout + row_base * qs + (int64_t)h * HD, qs, m0, seq);
        /* the per-query statistics asynchronously too (plain loads here stalled warps 0-1 every tile);
         * zeros beyond seq, where the masks test the row index instead */
        for (int i = threadIdx.x; i < BM; i += FUSED_THREADS) {
            const int qi = m0 + i;
            const bool ok = qi < seq;
            const int64_t at = ok ? (row_base + qi) * n_heads + h : 0;
            cp_async4(s_seg + buf * BM + i, segb + (ok ? qi : 0), ok);
            cp_async4(s_lse + buf * BM + i, lse + at, ok);
            cp_async4(s_D + buf * BM + i, dsum + at, ok);
        }
    };
    if (n_items > 0) issue(0, 0);
    cp_async_commit(); /* K, V and the first query tile */

    float dka[2][NH][4], dva[2][NH][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int i = 0; i < NH; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) dka[mi][i][e] = dva[mi][i][e] = 0.0f;

    for (int item = 0; item < n_items; item++) {
        const int cur = item & 1;
        cp_async_wait<0>();
        __syncthreads(); /* this tile landed; every warp is done with the previous one (both buffers, P, dS) */
        if (item + 1 < n_items) issue(item + 1, cur ^ 1);
        cp_async_commit();
        const int m0 = n0 + item * BM;
        const bf16 *Qs = Qbuf + cur * QT, *dOs = dObuf + cur * QT;
        const int *tseg = s_seg + cur * BM;
        const float *tlse = s_lse + cur * BM, *tD = s_D + cur * BM;
        /* no query of the tile sees our keys, nor (seg_start never decreases along a row) of any later tile:
         * done (block-uniform; rows beyond seq read 0, which never ends the loop) */
        if (warp_min_seg(tseg, BM) > n_last) break;

        /* 1. S^T = K Q^T and dP^T = V dO^T: rows kr0.. (2 m16 tiles), columns qc0.. (4 n8 tiles) */
        float st[2][4][4], dpt[2][4][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) st[mi][nt][e] = dpt[mi][nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            mma_32x32_k16(st, Ks, Qs, LD, kr0, qc0, kk * 16, lane);
            mma_32x32_k16(dpt, Vs, dOs, LD, kr0, qc0, kk * 16, lane);
        }

        /* 2. P^T and dS^T = P^T (dP^T - D) into shared memory (bf16); this thread's 8 queries' statistics
         * read once; no mask tests when every query of the tile sees every key of the CTA */
        float ql2[8], qd[8];
#pragma unroll
        for (int c = 0; c < 8; c++) {
            const int ci = qc0 + (c >> 1) * 8 + 2 * t + (c & 1);
            ql2[c] = tlse[ci] * 1.4426950408889634f;
            qd[c] = tD[ci];
        }
        const bool full = n0 + BN - 1 <= m0 && m0 + BM <= seq && warp_max_seg(tseg, BM) <= n0;
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = nt * 2 + (e & 1), ci = qc0 + nt * 8 + 2 * t + (e & 1);
                    bool ok = full;
                    if (!full) {
                        const int kj = n0 + kr0 + mi * 16 + g + (e >> 1) * 8;
                        ok = kj <= m0 + ci && kj >= tseg[ci] && m0 + ci < seq;
                    }
                    const float p = ok ? fast_exp2(st[mi][nt][e] * sl2 - ql2[c]) : 0.0f;
                    st[mi][nt][e] = p;
                    dpt[mi][nt][e] = p * (dpt[mi][nt][e] - qd[c]);
                }
                const int r = kr0 + mi * 16 + g, col = qc0 + nt * 8 + 2 * t;
                *(uint32_t *)(Ps + r * LDP + col) = pack_bf16(st[mi][nt][0], st[mi][nt][1]);
                *(uint32_t *)(Ps + (r + 8) * LDP + col) = pack_bf16(st[mi][nt][2], st[mi][nt][3]);
                *(uint32_t *)(dSs + r * LDP + col) = pack_bf16(dpt[mi][nt][0], dpt[mi][nt][1]);
                *(uint32_t *)(dSs + (r + 8) * LDP + col) = pack_bf16(dpt[mi][nt][2], dpt[mi][nt][3]);
            }
        __syncthreads(); /* P^T and dS^T complete */

        /* 3. dV += P^T dO and dK += dS^T Q: rows kr0.. (2 m16 tiles), columns hc0.. (NH n8 tiles), k = queries */
#pragma unroll
        for (int kq = 0; kq < BM / 16; kq++) {
            uint32_t pa[2][4], sa[2][4];
            lda_frag(pa[0], Ps, LDP, kr0, kq * 16, lane);
            lda_frag(pa[1], Ps, LDP, kr0 + 16, kq * 16, lane);
            lda_frag(sa[0], dSs, LDP, kr0, kq * 16, lane);
            lda_frag(sa[1], dSs, LDP, kr0 + 16, kq * 16, lane);
#pragma unroll
            for (int dp = 0; dp < NH / 2; dp++) {
                uint32_t bo[4], bq[4];
                ldsm_x4_trans(bo, dOs, LD, kq * 16, hc0 + dp * 16, lane);
                ldsm_x4_trans(bq, Qs, LD, kq * 16, hc0 + dp * 16, lane);
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    mma16816(dva[mi][2 * dp], pa[mi], bo[0], bo[1]);
                    mma16816(dva[mi][2 * dp + 1], pa[mi], bo[2], bo[3]);
                    mma16816(dka[mi][2 * dp], sa[mi], bq[0], bq[1]);
                    mma16816(dka[mi][2 * dp + 1], sa[mi], bq[2], bq[3]);
                }
            }
        }

        /* 4. dQ_acc += dS K: rows (queries) dr0.. (2 m16 tiles), columns dc0.. (NQ n8 tiles), k = keys (after
         * dK / dV, so the atomics overlap the next tile's loads) */
        float dqa[2][NQ][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int i = 0; i < NQ; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) dqa[mi][i][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t sq[2][4];
            lda_frag_trans(sq[0], dSs, LDP, kk * 16, dr0, lane);
            lda_frag_trans(sq[1], dSs, LDP, kk * 16, dr0 + 16, lane);
#pragma unroll
            for (int dp = 0; dp < NQ / 2; dp++) {
                uint32_t bk[4];
                ldsm_x4_trans(bk, Ks, LD, kk * 16, dc0 + dp * 16, lane);
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    mma16816(dqa[mi][2 * dp], sq[mi], bk[0], bk[1]);
                    mma16816(dqa[mi][2 * dp + 1], sq[mi], bk[2], bk[3]);
                }
            }
        }
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int qi = m0 + dr0 + mi * 16 + g + hf * 8;
                if (qi >= seq) continue;
                float *row = dq_acc + ((row_base + qi) * n_heads + h) * HD + dc0 + 2 * t;
#pragma unroll
                for (int nt = 0; nt < NQ; nt++) red_add2(row + nt * 8, dqa[mi][nt][2 * hf], dqa[mi][nt][2 * hf + 1]);
            }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int kj = n0 + kr0 + mi * 16 + g + hf * 8;
            if (kj >= seq) continue;
            if (PER_HEAD) {
                bf16 *pk = pdk + (row_base + kj) * qs + (int64_t)h * HD + hc0 + 2 * t;
                bf16 *pv = pdv + (row_base + kj) * qs + (int64_t)h * HD + hc0 + 2 * t;
#pragma unroll
                for (int nt = 0; nt < NH; nt++) {
                    *(uint32_t *)(pk + nt * 8) = pack_bf16(dka[mi][nt][2 * hf] * scale, dka[mi][nt][2 * hf + 1] * scale);
                    *(uint32_t *)(pv + nt * 8) = pack_bf16(dva[mi][nt][2 * hf], dva[mi][nt][2 * hf + 1]);
                }
            } else {
                bf16 *kr = dk + (row_base + kj) * ks + (int64_t)kvh * HD + hc0 + 2 * t;
                bf16 *vr = dv + (row_base + kj) * ks + (int64_t)kvh * HD + hc0 + 2 * t;
#pragma unroll
                for (int nt = 0; nt < NH; nt++) {
                    *(uint32_t *)(kr + nt * 8) = pack_bf16(dka[mi][nt][2 * hf] * scale, dka[mi][nt][2 * hf + 1] * scale);
                    *(uint32_t *)(vr + nt * 8) = pack_bf16(dva[mi][nt][2 * hf], dva[mi][nt][2 * hf + 1]);
                }
            }
        }
}

/* dq [n4 * 4] bf16 = acc * scale (float4 in, four bf16 out) */
static __global__ void attn_dq_convert_kernel(bf16 *dq, const float *acc, int64_t n4, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 a = ((const float4 *)acc)[i];
        uint2 o;
        o.x = pack_bf16(a.x * scale, a.y * scale);
        o.y = pack_bf16(a.z * scale, a.w * scale);
        ((uint2 *)dq)[i] = o;
    }
}

bool qlt_attn_bwd_fused_supported(int head_dim, qlt_backend *be) {
    if (head_dim == 64) return qlt_cuda_smem_fits(be, fused_cfg<64>::smem);
    if (head_dim == 128) return qlt_cuda_smem_fits(be, fused_cfg<128>::smem);
    return false;
}

size_t qlt_attn_bwd_fused_acc_bytes(int64_t n, int n_heads, int head_dim) {
    return sizeof(float) * (size_t)n * (size_t)n_heads * (size_t)head_dim;
}

template <int HD>
static void fused_launch(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, float *dq_acc, bf16 *pdk, bf16 *pdv,
                         const float *dsum, const bf16 *dout, const float *lse, const bf16 *q, const bf16 *k,
                         const bf16 *v, const int32_t *seg, int batch, int seq, int n_heads, int n_kv, float scale) {
    static bool attr_mha = false, attr_gqa = false;
    const size_t smem = fused_cfg<HD>::smem;
    const int64_t n = (int64_t)batch * seq;
    CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, qlt_attn_bwd_fused_acc_bytes(n, n_heads, HD), s));
    const unsigned grid = (unsigned)(((seq + fused_cfg<HD>::BN - 1) / fused_cfg<HD>::BN) * n_heads * batch);
    if (n_heads == n_kv) {
        attn_smem_attr(attn_bwd_fused_kernel<HD, false>, smem, &attr_mha);
        attn_bwd_fused_kernel<HD, false><<<grid, FUSED_THREADS, smem, s>>>(dq_acc, dk, dv, NULL, NULL, dout, lse, dsum,
                                                                          q, k, v, seg, seq, n_heads, n_kv, scale, batch);
    } else {
        attn_smem_attr(attn_bwd_fused_kernel<HD, true>, smem, &attr_gqa);
        attn_bwd_fused_kernel<HD, true><<<grid, FUSED_THREADS, smem, s>>>(dq_acc, NULL, NULL, pdk, pdv, dout, lse, dsum,
                                                                         q, k, v, seg, seq, n_heads, n_kv, scale, batch);
    }
    CUDA_CHECK_LAUNCH();
    const int64_t n4 = n * n_heads * HD / 4;
    attn_dq_convert_kernel<<<qlt_grid(n4, 256), 256, 0, s>>>(dq, dq_acc, n4, scale);
    CUDA_CHECK_LAUNCH();
}

void qlt_attn_bwd_fused(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, float *dq_acc, bf16 *pdk, bf16 *pdv,
                        const float *dsum, const bf16 *dout, const float *lse, const bf16 *q, const bf16 *k,
                        const bf16 *v, const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv,
                        int head_dim, float scale) {
    if (head_dim == 128)
        fused_launch<128>(s, dq, dk, dv, dq_acc, pdk, pdv, dsum, dout, lse, q, k, v, seg_start, batch, seq, n_heads,
                          n_kv, scale);
    else
        fused_launch<64>(s, dq, dk, dv, dq_acc, pdk, pdv, dsum, dout, lse, q, k, v, seg_start, batch, seq, n_heads,
                         n_kv, scale);
}
