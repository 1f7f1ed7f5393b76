/* attention_decode.cu: attention over a KV cache for generation (backend op attention_decode), the twin of
 * src/cpu/attention_decode.c: n new queries at positions pos[0] .. pos[n-1] (read from device memory, so a
 * captured decode step replays at the next position), query i attending keys 0 .. pos[i]; and kv_store, which
 * writes the new tokens' keys and values into the cache rows of their positions.
 *
 * One CTA of 4 warps for a (query, head) and a range of keys; each warp takes every 4th key of the range, two
 * keys at a time so two keys' loads are in flight: the lanes split the head's dimensions (lane e, e + 32, ...),
 * a shuffle reduction gives the score, and the warp keeps an online softmax (running max, sum, and the weighted
 * values of its lanes' dimensions in fp32). The warps' states meet in shared memory. When few (query, head)
 * pairs would leave the GPU idle (one token a step), the keys are split over several CTAs of a few dozen keys
 * each (flash-decoding, so no warp walks a long chain of dependent loads): each writes its unnormalized state to
 * the conversion
 * workspace and a second kernel combines them. The launch is sized for max_keys; a CTA whose range starts past
 * its query's keys leaves an empty state. Scores and sums are fp32; the output is rounded to bf16 once. */
#include <math.h>

#include "cuda/cuda_common.h"

#define DEC_WARPS 4
#define DEC_MAX_HD 256
#define DEC_KEYS_PER_SPLIT 32 /* keys a CTA takes when the keys are split: 8 a warp, two at a time */

/* A warp's (or CTA's) softmax state over some keys: max m, sum l = sum exp(s - m), acc = sum exp(s - m) v. */
struct dec_state {
    float m, l;
    float acc[DEC_MAX_HD / 32];
};

/* keys [k0, k1) of query i, head h; the state into *out (the CTA's combined state, lanes of warp 0 own dims) */
static __device__ void decode_range(const bf16 *q, const bf16 *kc, const bf16 *vc, int64_t i, int h, int64_t k0,
                                    int64_t k1, int n_heads, int n_kv, int hd, float scale, float *s_q,
                                    float *s_m, float *s_l, float *s_acc, dec_state *out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kvh = h / (n_heads / n_kv), per_lane = (hd + 31) / 32;
    const int64_t ks = (int64_t)n_kv * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x)
        s_q[e] = __bfloat162float(q[i * (int64_t)n_heads * hd + (int64_t)h * hd + e]) * scale;
    __syncthreads();
    dec_state st;
    st.m = -INFINITY;
    st.l = 0.0f;
#pragma unroll
    for (int t = 0; t < DEC_MAX_HD / 32; t++) st.acc[t] = 0.0f;
    for (int64_t j = k0 + warp; j < k1; j += 2 * DEC_WARPS) {
        /* keys j and j2 = j + DEC_WARPS (when in range): both rows loaded before either score is reduced */
        const int64_t j2 = j + DEC_WARPS;
        const bool two = j2 < k1;
        const bf16 *kj = kc + j * ks + (int64_t)kvh * hd, *vj = vc + j * ks + (int64_t)kvh * hd;
        const bf16 *kj2 = kc + (two ? j2 : j) * ks + (int64_t)kvh * hd, *vj2 = vc + (two ? j2 : j) * ks + (int64_t)kvh * hd;
        float kv1[DEC_MAX_HD / 32], kv2[DEC_MAX_HD / 32], vv1[DEC_MAX_HD / 32], vv2[DEC_MAX_HD / 32];
#pragma unroll
        for (int t = 0; t < DEC_MAX_HD / 32; t++) {
            const int e = lane + 32 * t;
            const bool ok = t < per_lane && e < hd;
            kv1[t] = ok ? __bfloat162float(kj[e]) : 0.0f;
            kv2[t] = ok ? __bfloat162float(kj2[e]) : 0.0f;
            vv1[t] = ok ? __bfloat162float(vj[e]) : 0.0f;
            vv2[t] = ok ? __bfloat162float(vj2[e]) : 0.0f;
        }
        float s = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int t = 0; t < DEC_MAX_HD / 32; t++) {
            const int e = lane + 32 * t;
            if (t < per_lane && e < hd) s += s_q[e] * kv1[t], s2 += s_q[e] * kv2[t];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            s += __shfl_xor_sync(0xffffffffu, s, o);
            s2 += __shfl_xor_sync(0xffffffffu, s2, o);
        }
        /* the online softmax takes key j, then key j2 (the order of the one-key loop) */
        float m_new = fmaxf(st.m, s), corr = __expf(st.m - m_new), p = __expf(s - m_new);
        st.l = st.l * corr + p;
#pragma unroll
        for (int t = 0; t < DEC_MAX_HD / 32; t++) st.acc[t] = st.acc[t] * corr + p * vv1[t];
        st.m = m_new;
        if (two) {
            m_new = fmaxf(st.m, s2), corr = __expf(st.m - m_new), p = __expf(s2 - m_new);
            st.l = st.l * corr + p;
#pragma unroll
            for (int t = 0; t < DEC_MAX_HD / 32; t++) st.acc[t] = st.acc[t] * corr + p * vv2[t];
            st.m = m_new;
        }
    }
    /* the warps' states meet: warp w writes m, l and its dims; warp 0 rescales each to the common max */
    if (lane == 0) s_m[warp] = st.m, s_l[warp] = st.l;
#pragma unroll
    for (int t = 0; t < DEC_MAX_HD / 32; t++) {
        const int e = lane + 32 * t;
        if (t < per_lane && e < hd) s_acc[warp * DEC_MAX_HD + e] = st.acc[t];
    }
    __syncthreads();
    if (warp != 0) return;
    float m = -INFINITY;
    for (int w = 0; w < DEC_WARPS; w++) m = fmaxf(m, s_m[w]);
    out->m = m;
    out->l = 0.0f;
    for (int t = 0; t < DEC_MAX_HD / 32; t++) out->acc[t] = 0.0f;
    for (int w = 0; w < DEC_WARPS; w++) {
        const float c = s_m[w] == -INFINITY ? 0.0f : __expf(s_m[w] - m);
        out->l += s_l[w] * c;
#pragma unroll
        for (int t = 0; t < DEC_MAX_HD / 32; t++) {
            const int e = lane + 32 * t;
            if (t < per_lane && e < hd) out->acc[t] += s_acc[w * DEC_MAX_HD + e] * c;
        }
    }
}

/* grid (n_heads, n, splits): CTA (h, i, s) takes keys [s * span, min((s + 1) * span, pos[i] + 1)). With one split
 * it writes the output; with more, its state to part [(i * n_heads + h) * splits + s] (hd + 2 floats: m, l, acc). */
static __global__ void __launch_bounds__(32 * DEC_WARPS) attn_decode_kernel(bf16 *out, float *part, const bf16 *q,
                                                                            const bf16 *kc, const bf16 *vc,
                                                                            const int32_t *pos, int n_heads,
                                                                            int n_kv, int hd, float scale,
                                                                            int64_t span) {
    __shared__ float s_q[DEC_MAX_HD], s_m[DEC_WARPS], s_l[DEC_WARPS];
    __shared__ float s_acc[DEC_WARPS * DEC_MAX_HD];
    const int h = blockIdx.x, splits = gridDim.z, s = blockIdx.z;
    const int64_t i = blockIdx.y, keys = (int64_t)pos[i] + 1;
    const int64_t k0 = (int64_t)s * span, k1 = k0 + span < keys ? k0 + span : keys;
    dec_state st;
    decode_range(q, kc, vc, i, h, k0 < keys ? k0 : keys, k1, n_heads, n_kv, hd, scale, s_q, s_m, s_l, s_acc, &st);
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x, per_lane = (hd + 31) / 32;
    if (splits == 1) {
        const float inv = 1.0f / st.l;
        bf16 *o = out + i * (int64_t)n_heads * hd + (int64_t)h * hd;
        for (int t = 0; t < per_lane; t++) {
            const int e = lane + 32 * t;
            if (e < hd) o[e] = __float2bfloat16(st.acc[t] * inv);
        }
        return;
    }
    float *p = part + ((i * n_heads + h) * (int64_t)splits + s) * (int64_t)(hd + 2);
    if (lane == 0) p[0] = st.m, p[1] = st.l;
    for (int t = 0; t < per_lane; t++) {
        const int e = lane + 32 * t;
        if (e < hd) p[2 + e] = st.acc[t];
    }
}

/* grid (n_heads, n), hd threads: the splits' states of (i, h) combined and normalized */
static __global__ void attn_decode_combine_kernel(bf16 *out, const float *part, int n_heads, int hd, int splits) {
    const int h = blockIdx.x, e = threadIdx.x;
    const int64_t i = blockIdx.y;
    const float *p = part + (i * n_heads + h) * (int64_t)splits * (hd + 2);
    float m = -INFINITY;
    for (int s = 0; s < splits; s++) m = fmaxf(m, p[s * (hd + 2)]);
    float l = 0.0f, acc = 0.0f;
    for (int s = 0; s < splits; s++) {
        const float ms = p[s * (hd + 2)];
        const float c = ms == -INFINITY ? 0.0f : __expf(ms - m);
        l += p[s * (hd + 2) + 1] * c;
        acc += p[s * (hd + 2) + 2 + e] * c;
    }
    out[i * (int64_t)n_heads * hd + (int64_t)h * hd + e] = __float2bfloat16(acc / l);
}

void qlt_cuda_attention_decode(qlt_backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                               const int32_t *pos, int64_t max_keys, int64_t n, int n_heads, int n_kv_heads,
                               int head_dim, float scale, int window) {
    if (n <= 0) return;
    QLT_ASSERT(window == 0); /* sliding windows are refused on CUDA before generation starts (kv_decoder.c) */
    QLT_ASSERT(head_dim <= DEC_MAX_HD && n_kv_heads > 0 && n_heads % n_kv_heads == 0 && n <= 65535 && max_keys >= n);
    cuda_impl *impl = cuda_impl_of(be);
    const int64_t keys = max_keys;
    /* split the keys only when the (query, head) pairs alone would leave most SMs idle */
    int64_t splits = 1;
    if (n * n_heads < 2 * (int64_t)impl->n_sm) {
        splits = (keys + DEC_KEYS_PER_SPLIT - 1) / DEC_KEYS_PER_SPLIT;
        const int64_t fit = 3 * QLT_CUDA_CONV_ELEMS / (n * n_heads * (head_dim + 2)); /* the workspace's room */
        if (splits > fit) splits = fit;
        if (splits > 1024) splits = 1024;
        if (splits < 1) splits = 1;
    }
    const int64_t span = (keys + splits - 1) / splits;
    dim3 grid((unsigned)n_heads, (unsigned)n, (unsigned)splits);
    attn_decode_kernel<<<grid, 32 * DEC_WARPS, 0, impl->stream>>>((bf16 *)out, impl->conv, (const bf16 *)q,
                                                                  (const bf16 *)k_cache, (const bf16 *)v_cache, pos,
                                                                  n_heads, n_kv_heads, head_dim, scale, span);
    CUDA_CHECK_LAUNCH();
    if (splits > 1) {
        attn_decode_combine_kernel<<<dim3((unsigned)n_heads, (unsigned)n), (unsigned)head_dim, 0, impl->stream>>>(
            (bf16 *)out, impl->conv, n_heads, head_dim, (int)splits);
        CUDA_CHECK_LAUNCH();
    }
}

/* grid (n, 2): row i of k_new (y = 0) or v_new (y = 1) into the cache row pos[i]; 16 bytes a thread */
static __global__ void kv_store_kernel(bf16 *kc, bf16 *vc, const bf16 *k_new, const bf16 *v_new, const int32_t *pos,
                                       int64_t width) {
    const int64_t i = blockIdx.x;
    const bf16 *src = (blockIdx.y == 0 ? k_new : v_new) + i * width;
    bf16 *dst = (blockIdx.y == 0 ? kc : vc) + (int64_t)pos[i] * width;
    if (width % 8 == 0) {
        for (int64_t e = 8 * (int64_t)threadIdx.x; e < width; e += 8 * (int64_t)blockDim.x)
            *reinterpret_cast<uint4 *>(dst + e) = *reinterpret_cast<const uint4 *>(src + e);
    } else {
        for (int64_t e = threadIdx.x; e < width; e += blockDim.x) dst[e] = src[e];
    }
}

void qlt_cuda_kv_store(qlt_backend *be, void *k_cache, void *v_cache, const void *k_new, const void *v_new,
                       const int32_t *pos, int64_t n, int64_t width) {
    if (n <= 0) return;
    QLT_ASSERT(n <= INT32_MAX);
    kv_store_kernel<<<dim3((unsigned)n, 2), 128, 0, cuda_impl_of(be)->stream>>>(
        (bf16 *)k_cache, (bf16 *)v_cache, (const bf16 *)k_new, (const bf16 *)v_new, pos, width);
    CUDA_CHECK_LAUNCH();
}
