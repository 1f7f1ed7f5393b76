/* attention_bwd_wgmma.cu: the one-pass attention backward of attention_bwd_fused.cu for head_dim 128 on
 * Hopper's warpgroup MMA (sm_90a): the same work split, masks, statistics and outputs (dQ by fp32 vector
 * atomics into the caller's accumulator; dK, dV as bf16, or per-query-head bf16 partials with GQA), with
 * the tensor cores fed from shared memory by wgmma instead of ldmatrix fragments.
 *
 * CTA: two warpgroups (256 threads), one batch row, one query head, keys n0..n0+127 (warpgroup w owns keys
 * n0 + 64 w ..+63; K and V resident), streaming the query tiles of 64 that can see them (double-buffered
 * Q, dO and their lse, D, seg_start). Per query tile, each warpgroup:
 *   1. S^T = K_w Q^T, dP^T = V_w dO^T       [64 keys x 64 queries]  wgmma m64n64k16, A and B K-major
 *   2. P^T = exp2(S^T scale log2e - lse log2e) masked, dS^T = P^T (dP^T - D)   (registers)
 *   3. dV_w += P^T dO, dK_w += dS^T Q        [64 keys x 128]          A from registers, B (dO, Q) N-major
 *   4. dS^T to shared memory (bf16); after both warpgroups wrote theirs:
 *      dQ[:, 64 w..] += dS K[:, 64 w..]      [64 queries x 64]        A = dS^T M-major, B = K N-major
 *      added to the fp32 accumulator with red.global.add.v2.
 * With train.deterministic the same kernel runs without step 4 (WITH_DQ false) and attn_dq_wgmma_kernel
 * below computes dQ with no atomics. Layouts and descriptors: wgmma_tiles.h.
 * Tensors: q, dout [B*S, n_heads*128], k, v [B*S, n_kv*128] (bf16); lse, dsum (D) [B*S, n_heads] fp32;
 * seg_start [B*S]; dq_acc [B*S, n_heads, 128] fp32 (zeroed by the caller); dk, dv [B*S, n_kv*128] bf16, or
 * with GQA the partials pdk, pdv [B*S, n_heads*128]; the deterministic dq [B*S, n_heads*128] bf16. */
#include "attention_bwd_wgmma.h"
#include "cuda/attention_tiles.h"
#include "wgmma_tiles.h"

#define WGB_THREADS 256
#define WGB_BN 128 /* keys a CTA */
#define WGB_BM 64  /* queries a streamed tile */
#define WGB_HD 128
#define WGB_KV_BYTES (WGB_BN * WGB_HD * 2) /* K or V */
#define WGB_Q_BYTES (WGB_BM * WGB_HD * 2)  /* a Q or dO stage */
#define WGB_DS_BYTES (WGB_BN * WGB_BM * 2) /* dS^T [128 keys][64 queries] */
#define WGB_SMEM (2 * WGB_KV_BYTES + 4 * WGB_Q_BYTES + WGB_DS_BYTES + 1024)

template <bool PER_HEAD, bool WITH_DQ>
static __global__ void __launch_bounds__(WGB_THREADS, 1)
    attn_bwd_wgmma_kernel(float *dq_acc, bf16 *dk, bf16 *dv, bf16 *pdk, bf16 *pdv, const bf16 *dout, const float *lse,
                          const float *dsum, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *seg_start,
                          int seq, int n_heads, int n_kv, float scale, int batch) {
#ifdef WGMMA_DEVICE_CODE
    constexpr int BN = WGB_BN, BM = WGB_BM, HD = WGB_HD;
    extern __shared__ __align__(1024) unsigned char wgb_smem[];
    __shared__ float s_lse[2][BM], s_D[2][BM];
    __shared__ int s_seg[2][BM];
    const uint32_t k_s = ((uint32_t)__cvta_generic_to_shared(wgb_smem) + 1023) & ~1023u;
    const uint32_t v_s = k_s + WGB_KV_BYTES, q_s0 = v_s + WGB_KV_BYTES, do_s0 = q_s0 + 2 * WGB_Q_BYTES;
    const uint32_t ds_s = do_s0 + 2 * WGB_Q_BYTES;

    /* 1-D grid, key tile slowest (as attention_bwd_fused.cu: the longest CTAs start first) */
    const int hb = n_heads * batch, tile = blockIdx.x / hb, h = blockIdx.x % n_heads, b = (blockIdx.x % hb) / n_heads;
    const int n0 = tile * BN, kvh = h / (n_heads / n_kv);
    const int wg = threadIdx.x >> 7, wq = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t qs = (int64_t)n_heads * HD, ks = (int64_t)n_kv * HD, row_base = (int64_t)b * seq;
    const int32_t *segb = seg_start + row_base;
    const float sl2 = scale * 1.4426950408889634f;
    const int n_items = (seq - n0 + BM - 1) / BM, n_last = min(n0 + BN - 1, seq - 1);

    sw128_load_tile<BN, WGB_THREADS>(k_s, k + row_base * ks + (int64_t)kvh * HD, ks, n0, seq);
    sw128_load_tile<BN, WGB_THREADS>(v_s, v + row_base * ks + (int64_t)kvh * HD, ks, n0, seq);
    auto issue = [&](int item, int buf) {
        const int m0 = n0 + item * BM;
        sw128_load_tile<BM, WGB_THREADS>(q_s0 + buf * WGB_Q_BYTES, q + row_base * qs + (int64_t)h * HD, qs, m0, seq);
        sw128_load_tile<BM, WGB_THREADS>(do_s0 + buf * WGB_Q_BYTES, dout + row_base * qs + (int64_t)h * HD, qs, m0, seq);
        for (int i = threadIdx.x; i < BM; i += WGB_THREADS) {
            const int qi = m0 + i;
            const bool ok = qi < seq;
            const int64_t at = ok ? (row_base + qi) * n_heads + h : 0;
            cp_async4(&s_seg[buf][i], segb + (ok ? qi : 0), ok);
            cp_async4(&s_lse[buf][i], lse + at, ok);
            cp_async4(&s_D[buf][i], dsum + at, ok);
        }
    };
    if (n_items > 0) issue(0, 0);
    cp_async_commit();

    float dka[64], dva[64];
#pragma unroll
    for (int i = 0; i < 64; i++) dka[i] = dva[i] = 0.0f;
    /* this thread's keys (rows of S^T): n0 + kl[hf] */
    const int kl0 = wg * 64 + wq * 16 + g;

    for (int item = 0; item < n_items; item++) {
        const int cur = item & 1;
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads(); /* this tile landed; every warpgroup is done with the other buffers and dS^T */
        if (item + 1 < n_items) issue(item + 1, cur ^ 1);
        cp_async_commit();
        const int m0 = n0 + item * BM;
        const int *tseg = s_seg[cur];
        const float *tlse = s_lse[cur], *tD = s_D[cur];
        if (warp_min_seg(tseg, BM) > n_last) break; /* as attention_bwd_fused.cu (block-uniform) */
        const uint32_t q_s = q_s0 + cur * WGB_Q_BYTES, do_s = do_s0 + cur * WGB_Q_BYTES;

        /* 1. S^T and dP^T */
        float st[32], dpt[32]; /* this warpgroup's 64 keys of K and V as the A operands */
        wgmma_pair_ss_n64<HD / 16>(st, dpt, k_s + wg * 64 * 128, v_s + wg * 64 * 128, BN * 128, q_s, do_s, BM * 128);

        /* 2. P^T, dS^T; no mask tests when every query of the tile sees every key of the CTA */
        const bool full = n0 + BN - 1 <= m0 && m0 + BM <= seq && warp_max_seg(tseg, BM) <= n0;
#pragma unroll
        for (int nt = 0; nt < BM / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int ci = nt * 8 + 2 * t + (e & 1), qi = m0 + ci;
                bool ok = full;
                if (!full) {
                    const int kj = n0 + kl0 + (e >> 1) * 8;
                    ok = kj <= qi && kj >= tseg[ci] && qi < seq;
                }
                const float p = ok ? fast_exp2(st[nt * 4 + e] * sl2 - tlse[ci] * 1.4426950408889634f) : 0.0f;
                st[nt * 4 + e] = p;
                dpt[nt * 4 + e] = p * (dpt[nt * 4 + e] - tD[ci]);
            }
        /* P^T and dS^T as A fragments: k16 step kq covers the query n8 tiles 2 kq, 2 kq + 1 */
        uint32_t pa[BM / 16][4], sa[BM / 16][4];
        acc_to_a_frags<BM / 16>(pa, st);
        acc_to_a_frags<BM / 16>(sa, dpt);
        if (WITH_DQ) {
        /* dS^T into shared memory [128 keys][64 queries] (one swizzled block) for dQ: the same bf16 pairs,
         * sa[kq][2 (nt & 1) + hf] holding query tile nt = 2 kq + (nt & 1), key row kl0 + 8 hf */
#pragma unroll
        for (int nt = 0; nt < BM / 8; nt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int kr = kl0 + hf * 8;
                const uint32_t off = kr * 128 + ((nt ^ (kr & 7)) << 4) + t * 4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_s + off), "r"(sa[nt >> 1][2 * (nt & 1) + hf]) : "memory");
            }
        }

        /* 3. dV_w += P^T dO, dK_w += dS^T Q */
        wgmma_fence();
#pragma unroll
        for (int kq = 0; kq < BM / 16; kq++) {
            wgmma_rs_n128_tb(dva, pa[kq], wgmma_desc(do_s + kq * 2048, BM * 128, 1024));
            wgmma_rs_n128_tb(dka, sa[kq], wgmma_desc(q_s + kq * 2048, BM * 128, 1024));
        }
        wgmma_commit();

        if (!WITH_DQ) {
            wgmma_wait<0>();
            reg_fence(dva, 64);
            reg_fence(dka, 64);
            reg_fence_u(&pa[0][0], 4 * (BM / 16));
            reg_fence_u(&sa[0][0], 4 * (BM / 16));
            continue;
        }
        /* 4. dQ[:, 64 wg..] = dS K[:, 64 wg..] once both warpgroups' dS^T are in shared memory */
        fence_proxy_async();
        __syncthreads();
        float dqa[32];
#pragma unroll
        for (int i = 0; i < 32; i++) dqa[i] = 0.0f;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
            wgmma_ss_n64<1, 1>(dqa, wgmma_desc(ds_s + kk * 2048, BM * 128, 1024),
                               wgmma_desc(k_s + wg * (BN * 128) + kk * 2048, BN * 128, 1024));
        wgmma_commit();
        wgmma_wait<0>();
        reg_fence(dva, 64);
        reg_fence(dka, 64);
        reg_fence(dqa, 32);
        reg_fence_u(&pa[0][0], 4 * (BM / 16));
        reg_fence_u(&sa[0][0], 4 * (BM / 16));
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int qi = m0 + wq * 16 + g + hf * 8;
            if (qi >= seq) continue;
            float *row = dq_acc + ((row_base + qi) * n_heads + h) * HD + wg * 64 + 2 * t;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float *p = row + nt * 8;
                asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(dqa[nt * 4 + 2 * hf]),
                             "f"(dqa[nt * 4 + 2 * hf + 1])
                             : "memory");
            }
        }
    }
    cp_async_wait<0>();
    /* dK (scaled) and dV: rows (keys) n0 + kl0 + 8 hf, columns 8 nt + 2 t */
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int kj = n0 + kl0 + hf * 8;
        if (kj >= seq) continue;
        bf16 *kr, *vr;
        if (PER_HEAD) {
            kr = pdk + (row_base + kj) * qs + (int64_t)h * HD + 2 * t;
            vr = pdv + (row_base + kj) * qs + (int64_t)h * HD + 2 * t;
        } else {
            kr = dk + (row_base + kj) * ks + (int64_t)kvh * HD + 2 * t;
            vr = dv + (row_base + kj) * ks + (int64_t)kvh * HD + 2 * t;
        }
#pragma unroll
        for (int nt = 0; nt < HD / 8; nt++) {
            *(uint32_t *)(kr + nt * 8) = pack_bf16(dka[nt * 4 + 2 * hf] * scale, dka[nt * 4 + 2 * hf + 1] * scale);
            *(uint32_t *)(vr + nt * 8) = pack_bf16(dva[nt * 4 + 2 * hf], dva[nt * 4 + 2 * hf + 1]);
        }
    }
#endif
}

/* ---- deterministic dQ (train.deterministic): no atomics; a CTA owns 128 queries (64 a warpgroup) and
 * loops over the key tiles of 64 that its queries see, recomputing S, P, dP (as attention.cu's two-kernel
 * backward does with mma.sync):
 *   S = Q K^T, dP = dO V^T       [64 queries x 64 keys]   wgmma m64n64k16, A and B K-major
 *   dS = P (dP - D)              registers (this thread's two rows' lse and D in registers)
 *   dQ += dS K                   [64 queries x 128]        A = dS from registers, B = K N-major
 * then dQ * scale rounded to bf16 once. K and V double-buffered by cp.async; Q and dO resident. ---- */

#define WGQ_BM 128 /* queries a CTA */
#define WGQ_BN 64  /* keys a tile */
#define WGQ_ROWS_BYTES (WGQ_BM * WGB_HD * 2)
#define WGQ_KV_BYTES (WGQ_BN * WGB_HD * 2)
#define WGQ_SMEM (2 * WGQ_ROWS_BYTES + 4 * WGQ_KV_BYTES + 1024)

static __global__ void __launch_bounds__(WGB_THREADS, 1)
    attn_dq_wgmma_kernel(bf16 *dq, const bf16 *dout, const float *lse, const float *dsum, const bf16 *q, const bf16 *k,
                         const bf16 *v, const int32_t *seg_start, int seq, int n_heads, int n_kv, float scale) {
#ifdef WGMMA_DEVICE_CODE
    constexpr int BM = WGQ_BM, BN = WGQ_BN, HD = WGB_HD;
    extern __shared__ __align__(1024) unsigned char wgq_smem[];
    __shared__ int s_seg[BM];
    const uint32_t q_s = ((uint32_t)__cvta_generic_to_shared(wgq_smem) + 1023) & ~1023u;
    const uint32_t do_s = q_s + WGQ_ROWS_BYTES, kv_s = do_s + WGQ_ROWS_BYTES; /* stage st: K, then V */

    /* grid (heads, batch, query tiles), longest (last) tiles first, as the forward */
    const int m0 = (gridDim.z - 1 - blockIdx.z) * BM;
    const int h = blockIdx.x, b = blockIdx.y, kvh = h / (n_heads / n_kv);
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t qs = (int64_t)n_heads * HD, ks = (int64_t)n_kv * HD, row_base = (int64_t)b * seq;
    const bf16 *kb = k + row_base * ks + (int64_t)kvh * HD, *vb = v + row_base * ks + (int64_t)kvh * HD;
    const int32_t *segb = seg_start + row_base;
    const float sl2 = scale * 1.4426950408889634f;

    for (int i = threadIdx.x; i < BM; i += WGB_THREADS) s_seg[i] = m0 + i < seq ? segb[m0 + i] : INT_MAX;
    sw128_load_tile<BM, WGB_THREADS>(q_s, q + row_base * qs + (int64_t)h * HD, qs, m0, seq);
    sw128_load_tile<BM, WGB_THREADS>(do_s, dout + row_base * qs + (int64_t)h * HD, qs, m0, seq);
    cp_async_commit();
    __syncthreads();
    const int minseg = warp_min_seg(s_seg, BM);
    /* this thread's rows m0 + 64 wg + 16 warp + g + 8 hf, their segment starts and statistics */
    int row[2], seg[2];
    float lse2[2], dd[2];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int local = wg * 64 + warp * 16 + g + 8 * hf;
        row[hf] = m0 + local;
        seg[hf] = s_seg[local];
        const bool in = row[hf] < seq;
        const int64_t at = (row_base + (in ? row[hf] : 0)) * n_heads + h;
        lse2[hf] = in ? lse[at] * 1.4426950408889634f : 0.0f;
        dd[hf] = in ? dsum[at] : 0.0f;
    }
    const int last = min(m0 + BM - 1, seq - 1), wg_last = min(m0 + wg * 64 + 63, seq - 1);
    const int n_begin = (minseg / BN) * BN;
    sw128_load_tile<BN, WGB_THREADS>(kv_s, kb, ks, n_begin, seq);
    sw128_load_tile<BN, WGB_THREADS>(kv_s + WGQ_KV_BYTES, vb, ks, n_begin, seq);
    cp_async_commit();

    float dqa[64];
#pragma unroll
    for (int i = 0; i < 64; i++) dqa[i] = 0.0f;
    const uint32_t q_wg = q_s + wg * 64 * 128, do_wg = do_s + wg * 64 * 128;
    int it = 0;
    for (int n0 = n_begin; n0 <= last; n0 += BN, it++) {
        const int st = it & 1;
        const uint32_t k_s = kv_s + st * 2 * WGQ_KV_BYTES, v_s = k_s + WGQ_KV_BYTES;
        if (n0 + BN <= last) { /* the next tile into the other stage (read last iteration) */
            const uint32_t k_n = kv_s + (st ^ 1) * 2 * WGQ_KV_BYTES;
            sw128_load_tile<BN, WGB_THREADS>(k_n, kb, ks, n0 + BN, seq);
            sw128_load_tile<BN, WGB_THREADS>(k_n + WGQ_KV_BYTES, vb, ks, n0 + BN, seq);
        }
        cp_async_commit();
        cp_async_wait<1>();
        fence_proxy_async();
        __syncthreads();
        if (n0 <= wg_last) { /* else every key of the tile is after this warpgroup's rows */
            float sv[32], dp[32]; /* S = Q K^T, dP = dO V^T */
            wgmma_pair_ss_n64<HD / 16>(sv, dp, q_wg, do_wg, BM * 128, k_s, v_s, BN * 128);
            const bool full = n0 + BN - 1 <= row[0] && n0 >= seg[0] && n0 >= seg[1] && row[1] < seq;
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int hf = e >> 1, j = n0 + nt * 8 + 2 * t + (e & 1);
                    const bool ok = full || (row[hf] < seq && j <= row[hf] && j >= seg[hf]);
                    const float pv = ok ? fast_exp2(sv[nt * 4 + e] * sl2 - lse2[hf]) : 0.0f;
                    sv[nt * 4 + e] = pv * (dp[nt * 4 + e] - dd[hf]); /* dS */
                }
            wgmma_acc_rs_n128<BN / 16>(dqa, sv, k_s); /* dQ += dS K */
        }
        __syncthreads(); /* this stage is refilled by the next iteration's prefetch */
    }
    cp_async_wait<0>();
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        if (row[hf] >= seq) continue;
        bf16 *out = dq + (row_base + row[hf]) * qs + (int64_t)h * HD + 2 * t;
#pragma unroll
        for (int nt = 0; nt < HD / 8; nt++)
            *(uint32_t *)(out + nt * 8) = pack_bf16(dqa[nt * 4 + 2 * hf] * scale, dqa[nt * 4 + 2 * hf + 1] * scale);
    }
#endif
}

bool qlt_attn_bwd_wgmma_usable(int head_dim) { return head_dim == WGB_HD && qlt_wgmma_attention_enabled(); }

/* the backward kernel over a 1-D grid of key tiles: dK / dV, or GQA's per-head partials; with WITH_DQ also
 * dQ into dq_acc */
template <bool WITH_DQ>
static void bwd_launch(cudaStream_t s, float *dq_acc, bf16 *dk, bf16 *dv, bf16 *pdk, bf16 *pdv, const float *dsum,
                       const bf16 *dout, const float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                       const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv, float scale) {
    static bool attr_mha = false, attr_gqa = false;
    const unsigned grid = (unsigned)(((seq + WGB_BN - 1) / WGB_BN) * n_heads * batch);
    if (n_heads == n_kv) {
        attn_smem_attr(attn_bwd_wgmma_kernel<false, WITH_DQ>, WGB_SMEM, &attr_mha);
        attn_bwd_wgmma_kernel<false, WITH_DQ><<<grid, WGB_THREADS, WGB_SMEM, s>>>(
            dq_acc, dk, dv, NULL, NULL, dout, lse, dsum, q, k, v, seg_start, seq, n_heads, n_kv, scale, batch);
    } else {
        attn_smem_attr(attn_bwd_wgmma_kernel<true, WITH_DQ>, WGB_SMEM, &attr_gqa);
        attn_bwd_wgmma_kernel<true, WITH_DQ><<<grid, WGB_THREADS, WGB_SMEM, s>>>(
            dq_acc, NULL, NULL, pdk, pdv, dout, lse, dsum, q, k, v, seg_start, seq, n_heads, n_kv, scale, batch);
    }
    CUDA_CHECK_LAUNCH();
}

void qlt_attn_bwd_wgmma(cudaStream_t s, float *dq_acc, bf16 *dk, bf16 *dv, bf16 *pdk, bf16 *pdv, const float *dsum,
                        const bf16 *dout, const float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                        const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv, float scale) {
    bwd_launch<true>(s, dq_acc, dk, dv, pdk, pdv, dsum, dout, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv, scale);
}

void qlt_attn_bwd_wgmma_deterministic(cudaStream_t s, bf16 *dq, bf16 *dk, bf16 *dv, bf16 *pdk, bf16 *pdv,
                                      const float *dsum, const bf16 *dout, const float *lse, const bf16 *q,
                                      const bf16 *k, const bf16 *v, const int32_t *seg_start, int batch, int seq,
                                      int n_heads, int n_kv, float scale) {
    static bool attr_dq = false;
    bwd_launch<false>(s, NULL, dk, dv, pdk, pdv, dsum, dout, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv, scale);
    attn_smem_attr(attn_dq_wgmma_kernel, WGQ_SMEM, &attr_dq);
    dim3 gq(n_heads, batch, (seq + WGQ_BM - 1) / WGQ_BM);
    attn_dq_wgmma_kernel<<<gq, WGB_THREADS, WGQ_SMEM, s>>>(dq, dout, lse, dsum, q, k, v, seg_start, seq, n_heads, n_kv,
                                                           scale);
    CUDA_CHECK_LAUNCH();
}
