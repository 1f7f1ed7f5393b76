/* attention_fwd_wgmma.cu: the causal attention forward for head_dim 128 on Hopper's warpgroup MMA
 * (wgmma.mma_async, sm_90a): the same semantics and outputs as attn_fwd_kernel in attention.cu (packed-example
 * masking, online softmax in exp2, lse per (token, head)), with the tensor cores fed from shared memory
 * directly instead of through ldmatrix into registers, which bounds the mma.sync kernel.
 *
 * CTA: two warpgroups (256 threads), 128 query rows (64 a warpgroup), key tiles of 128 in three cp.async
 * stages (so one barrier a tile: the stage being refilled was read two tiles ago). Per key tile, each warpgroup: S [64 x 128] = Q K^T as 8 wgmma m64n128k16 (A = Q, B = K, both from
 * shared memory, K-major), mask + online softmax on the accumulators, then O [64 x 128] += P V as 8 wgmma
 * with P from registers (the S accumulators rounded to bf16 are exactly the A fragments) and V from shared
 * memory read N-major. The two warpgroups' softmax and MMA phases interleave on the SM.
 * Shared-memory layouts and descriptors: wgmma_tiles.h (Q, K K-major; V N-major).
 * Tensors: q, out [B*S, n_heads*128], k, v [B*S, n_kv*128] (bf16); lse [B*S, n_heads] fp32; seg_start [B*S]. */
#include "attention_fwd_wgmma.h"
#include "cuda/attention_tiles.h"
#include "wgmma_tiles.h"

#define WGA_THREADS 256
#define WGA_BM 128 /* query rows a CTA */
#define WGA_BN 128 /* keys a tile */
#define WGA_HD 128
#define WGA_Q_BYTES (WGA_BM * WGA_HD * 2)
#define WGA_KV_BYTES (WGA_BN * WGA_HD * 2)
#define WGA_STAGES 3
#define WGA_SMEM (WGA_Q_BYTES + 2 * WGA_STAGES * WGA_KV_BYTES + 1024) /* Q, the K and V stages, alignment slack */

static __global__ void __launch_bounds__(WGA_THREADS, 1)
    attn_fwd_wgmma_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *seg_start,
                          int seq, int n_heads, int n_kv, float scale) {
#ifdef WGMMA_DEVICE_CODE
    extern __shared__ __align__(1024) unsigned char wga_smem[];
    __shared__ int s_seg[WGA_BM];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(wga_smem);
    const uint32_t q_s = (raw + 1023) & ~1023u; /* Q [128 rows]; then K / V stages */
    const uint32_t kv_s = q_s + WGA_Q_BYTES;    /* stage st: K at kv_s + 2 st KV, V after it */

    /* grid (heads, batch, query tiles), longest (last) tiles first as in attention.cu */
    const int m0 = (gridDim.z - 1 - blockIdx.z) * WGA_BM;
    const int h = blockIdx.x, b = blockIdx.y, kvh = h / (n_heads / n_kv);
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int64_t qs = (int64_t)n_heads * WGA_HD, ks = (int64_t)n_kv * WGA_HD;
    const bf16 *qb = q + (int64_t)b * seq * qs + (int64_t)h * WGA_HD;
    const bf16 *kb = k + (int64_t)b * seq * ks + (int64_t)kvh * WGA_HD;
    const bf16 *vb = v + (int64_t)b * seq * ks + (int64_t)kvh * WGA_HD;
    const int32_t *segb = seg_start + (int64_t)b * seq;

    for (int i = threadIdx.x; i < WGA_BM; i += WGA_THREADS) s_seg[i] = m0 + i < seq ? segb[m0 + i] : INT_MAX;
    sw128_load_tile<WGA_BM, WGA_THREADS>(q_s, qb, qs, m0, seq);
    cp_async_commit();
    __syncthreads();
    const int minseg = warp_min_seg(s_seg, WGA_BM);
    /* this thread's rows: m0 + 64 wg + 16 warp + g + 8 hf */
    int row[2], seg[2];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int local = wg * 64 + warp * 16 + g + 8 * hf;
        row[hf] = m0 + local;
        seg[hf] = s_seg[local];
    }
    const int last = min(m0 + WGA_BM - 1, seq - 1), wg_last = min(m0 + wg * 64 + 63, seq - 1);
    const int n_begin = (minseg / WGA_BN) * WGA_BN;
    const float sl2 = scale * 1.4426950408889634f;

    sw128_load_tile<WGA_BN, WGA_THREADS>(kv_s, kb, ks, n_begin, seq);
    sw128_load_tile<WGA_BN, WGA_THREADS>(kv_s + WGA_KV_BYTES, vb, ks, n_begin, seq);
    cp_async_commit();

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    const uint32_t q_wg = q_s + wg * 64 * 128;

    int it = 0;
    for (int n0 = n_begin; n0 <= last; n0 += WGA_BN, it++) {
        const int st = it % WGA_STAGES;
        const uint32_t k_s = kv_s + st * 2 * WGA_KV_BYTES, v_s = k_s + WGA_KV_BYTES;
        if (n0 + WGA_BN <= last) { /* prefetch the next tile into the stage read two iterations ago: every
                                      thread passed the previous iteration's barrier, so is done with it */
            const uint32_t k_n = kv_s + ((it + 1) % WGA_STAGES) * 2 * WGA_KV_BYTES;
            sw128_load_tile<WGA_BN, WGA_THREADS>(k_n, kb, ks, n0 + WGA_BN, seq);
            sw128_load_tile<WGA_BN, WGA_THREADS>(k_n + WGA_KV_BYTES, vb, ks, n0 + WGA_BN, seq);
        }
        cp_async_commit();
        cp_async_wait<1>();
        fence_proxy_async(); /* cp.async writes -> wgmma reads */
        __syncthreads();
        if (n0 <= wg_last) { /* else every key of the tile is after this warpgroup's rows */
            float s[64];
#pragma unroll
            for (int i = 0; i < 64; i++) s[i] = 0.0f;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < WGA_HD / 16; kk++)
                wgmma_ss_n128<0, 0>(s, wgmma_desc(q_wg + (kk >> 2) * (WGA_BM * 128) + (kk & 3) * 32, 16, 1024),
                         wgmma_desc(k_s + (kk >> 2) * (WGA_BN * 128) + (kk & 3) * 32, 16, 1024));
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(s, 64);
            /* mask unless every key of the tile is visible to both rows of this thread */
            if (!(n0 + WGA_BN - 1 <= row[0] && n0 >= seg[0] && n0 >= seg[1])) {
#pragma unroll
                for (int nt = 0; nt < WGA_BN / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int j = n0 + nt * 8 + 2 * t + (e & 1);
                        if (j > row[e >> 1] || j < seg[e >> 1]) s[nt * 4 + e] = -INFINITY;
                    }
            }
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                float mx = mrow[hf];
#pragma unroll
                for (int nt = 0; nt < WGA_BN / 8; nt++) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * hf], s[nt * 4 + 2 * hf + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mu = mx == -INFINITY ? 0.0f : mx * sl2;
                const float alpha = fast_exp2(mrow[hf] * sl2 - mu); /* 0 when the old max was -inf */
                mrow[hf] = mx;
                float rs = 0.0f;
#pragma unroll
                for (int nt = 0; nt < WGA_BN / 8; nt++) {
                    const float p0 = fast_exp2(s[nt * 4 + 2 * hf] * sl2 - mu);
                    const float p1 = fast_exp2(s[nt * 4 + 2 * hf + 1] * sl2 - mu);
                    s[nt * 4 + 2 * hf] = p0;
                    s[nt * 4 + 2 * hf + 1] = p1;
                    rs += p0 + p1;
                }
                lrow[hf] = lrow[hf] * alpha + rs;
#pragma unroll
                for (int dt = 0; dt < WGA_HD / 8; dt++) {
                    o[dt * 4 + 2 * hf] *= alpha;
                    o[dt * 4 + 2 * hf + 1] *= alpha;
                }
            }
            /* O += P V, P as the A fragments (k16 step kk covers the n8 tiles 2kk, 2kk + 1) */
            wgmma_acc_rs_n128<WGA_BN / 16>(o, s, v_s);
        }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float l = lrow[hf];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int i = row[hf];
        if (i >= seq) continue;
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        bf16 *orow = out + ((int64_t)b * seq + i) * qs + (int64_t)h * WGA_HD;
#pragma unroll
        for (int dt = 0; dt < WGA_HD / 8; dt++)
            *(uint32_t *)(orow + dt * 8 + 2 * t) = pack_bf16(o[dt * 4 + 2 * hf] * inv, o[dt * 4 + 2 * hf + 1] * inv);
        if (t == 0) lse[((int64_t)b * seq + i) * n_heads + h] = mrow[hf] * scale + logf(l);
    }
#endif
}

bool qlt_wgmma_attention_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        int dev = 0, major = 0, minor = 0;
        enabled = cudaGetDevice(&dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
                  major == 9 && minor == 0;
    }
    return enabled;
}

bool qlt_attn_fwd_wgmma_usable(int head_dim) { return head_dim == WGA_HD && qlt_wgmma_attention_enabled(); }

void qlt_attn_fwd_wgmma(cudaStream_t s, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                        const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv, float scale) {
    static bool attr = false;
    attn_smem_attr(attn_fwd_wgmma_kernel, WGA_SMEM, &attr);
    dim3 grid(n_heads, batch, (seq + WGA_BM - 1) / WGA_BM);
    attn_fwd_wgmma_kernel<<<grid, WGA_THREADS, WGA_SMEM, s>>>(out, lse, q, k, v, seg_start, seq, n_heads, n_kv, scale);
    CUDA_CHECK_LAUNCH();
}
