/* attention_tiles.h: the tensor-core building blocks both attention kernels files share (attention.cu:
 * forward and the deterministic two-kernel backward; attention_bwd_fused.cu: the one-pass backward):
 * mma.sync m16n8k16 on bf16, ldmatrix fragment loads from padded row-major shared-memory tiles, cp.async
 * tile loads, exp2 on the SFU and the segment-bound reductions of a query tile.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 bf16; g = lane / 4, t = lane % 4):
 *   A 16x16 row-major: reg0 = A[g][2t..2t+1], reg1 = A[g+8][2t..], reg2 = A[g][2t+8..], reg3 = A[g+8][2t+8..]
 *   B 16x8  (k x n)  : reg0 = B[2t..2t+1][g], reg1 = B[2t+8..2t+9][g]
 *   C 16x8           : c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
 * Tiles live in shared memory row-major with rows padded by 8 bf16 (16 bytes), which makes the ldmatrix
 * row addresses conflict-free. Included from the attention .cu files and lora_dudb.cu. */
#ifndef QLT_CUDA_ATTENTION_TILES_H
#define QLT_CUDA_ATTENTION_TILES_H

#include "cuda/cuda_common.h"

#include <limits.h>

#define ATT_THREADS 128 /* threads of the forward and the two-kernel backward's CTAs */

static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

#ifdef QLT_ATTN_NO_LDMATRIX
static __device__ __forceinline__ uint32_t lds32(const bf16 *p) { return *(const uint32_t *)p; }
#endif

/* B fragments of n-tiles (n0, n0+8) for k rows k0..k0+15 of a row-major [k][n] smem tile */
static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const bf16 *tile, int ld, int k0, int n0,
                                                     int lane) {
#ifdef QLT_ATTN_NO_LDMATRIX
    /* reference path: plain 16-bit loads (for bisecting a suspected ldmatrix problem) */
    int g = lane >> 2, t = lane & 3;
    const unsigned short *u = (const unsigned short *)tile;
#define LD2(kk, nn) ((uint32_t)u[(kk)*ld + (nn)] | ((uint32_t)u[((kk) + 1) * ld + (nn)] << 16))
    r[0] = LD2(k0 + 2 * t, n0 + g);
    r[1] = LD2(k0 + 2 * t + 8, n0 + g);
    r[2] = LD2(k0 + 2 * t, n0 + 8 + g);
    r[3] = LD2(k0 + 2 * t + 8, n0 + 8 + g);
#undef LD2
#else
    const bf16 *p = tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8;
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

/* rows [row0, row0 + ROWS) of a [seq, *] bf16 matrix (row stride `stride`, HD columns from src) into
 * smem (row stride HD + 8) with cp.async (16 bytes a copy, zero-filled beyond seq); the caller commits
 * and waits */
template <int HD, int ROWS, int NT = ATT_THREADS>
static __device__ __forceinline__ void load_tile_async(bf16 *dst, const bf16 *src, int64_t stride, int row0, int seq) {
    constexpr int VPR = HD / 8; /* 16-byte vectors per row */
    for (int idx = threadIdx.x; idx < ROWS * VPR; idx += NT) {
        int r = idx / VPR, c = (idx % VPR) * 8;
        bool ok = row0 + r < seq;
        const bf16 *g = ok ? src + (int64_t)(row0 + r) * stride + c : src;
        uint32_t sa = (uint32_t)__cvta_generic_to_shared(dst + r * (HD + 8) + c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g), "r"(ok ? 16 : 0));
    }
}

/* 4 bytes global -> shared with cp.async (zero-filled when !ok; src must still be a valid address) */
static __device__ __forceinline__ void cp_async4(void *dst, const void *src, bool ok) {
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(src), "r"(ok ? 4 : 0));
}

static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* A fragment of rows r0..r0+15, k columns k0..k0+15 of a row-major smem tile: one ldmatrix.x4 (its four
 * 8x8 matrices are a0..a3 of the mma A layout) */
static __device__ __forceinline__ void lda_frag(uint32_t a[4], const bf16 *tile, int ld, int r0, int k0, int lane) {
#ifdef QLT_ATTN_NO_LDMATRIX
    int g = lane >> 2, t = lane & 3;
    a[0] = lds32(tile + (r0 + g) * ld + k0 + 2 * t);
    a[1] = lds32(tile + (r0 + g + 8) * ld + k0 + 2 * t);
    a[2] = lds32(tile + (r0 + g) * ld + k0 + 2 * t + 8);
    a[3] = lds32(tile + (r0 + g + 8) * ld + k0 + 2 * t + 8);
#else
    const bf16 *p = tile + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + k0 + ((lane >> 4) & 1) * 8;
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
#endif
}

/* B fragments of the n-tiles n0 and n0+8 (k columns k0..k0+15) of a row-major [n][k] smem tile (K for
 * S = Q K^T): b[0], b[1] for n0 and b[2], b[3] for n0 + 8, one ldmatrix.x4 */
static __device__ __forceinline__ void ldb_pair(uint32_t b[4], const bf16 *tile, int ld, int n0, int k0, int lane) {
#ifdef QLT_ATTN_NO_LDMATRIX
    int g = lane >> 2, t = lane & 3;
    b[0] = lds32(tile + (n0 + g) * ld + k0 + 2 * t);
    b[1] = lds32(tile + (n0 + g) * ld + k0 + 2 * t + 8);
    b[2] = lds32(tile + (n0 + 8 + g) * ld + k0 + 2 * t);
    b[3] = lds32(tile + (n0 + 8 + g) * ld + k0 + 2 * t + 8);
#else
    const bf16 *p = tile + (n0 + (lane & 7) + ((lane >> 4) & 1) * 8) * ld + k0 + ((lane >> 3) & 1) * 8;
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(addr));
#endif
}

/* A fragment of A = T^T (rows m0..m0+15, k columns k0..k0+15) where T is a row-major [k][m] smem tile
 * (dS^T stored key-major, read as dS for dQ = dS K): one ldmatrix.x4.trans; matrix j = lane / 8 is
 * a[j]: rows m0 + 8 (j & 1), k columns k0 + 8 (j >> 1) */
static __device__ __forceinline__ void lda_frag_trans(uint32_t a[4], const bf16 *tile, int ld, int k0, int m0,
                                                      int lane) {
    const bf16 *p = tile + (k0 + (lane & 7) + ((lane >> 4) & 1) * 8) * ld + m0 + ((lane >> 3) & 1) * 8;
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
}

/* 2^x on the SFU (ex2.approx: ~2 ulp; 2^-inf = 0), as flash-attention kernels use */
static __device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* the smallest (LARGEST false) or largest seg_start of a tile's rows s_seg[rows], computed by every warp
 * (so the result is block-uniform without a barrier); s_seg must be visible (after a barrier) */
template <bool LARGEST> static __device__ __forceinline__ int warp_seg_bound(const int *s_seg, int rows) {
    int m = LARGEST ? INT_MIN : INT_MAX;
    for (int i = threadIdx.x & 31; i < rows; i += 32) m = LARGEST ? max(m, s_seg[i]) : min(m, s_seg[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const int other = __shfl_xor_sync(0xffffffffu, m, o);
        m = LARGEST ? max(m, other) : min(m, other);
    }
    return m;
}
static __device__ __forceinline__ int warp_min_seg(const int *s_seg, int rows) { return warp_seg_bound<false>(s_seg, rows); }
static __device__ __forceinline__ int warp_max_seg(const int *s_seg, int rows) { return warp_seg_bound<true>(s_seg, rows); }

/* acc [32 x 32] (two m16 row tiles x four n8 column tiles) += A[r0..r0+31, k0..k0+15] .
 * B[c0..c0+31, k0..k0+15]^T, A and B row-major [rows][k] smem tiles of row stride ld: one k16 step */
static __device__ __forceinline__ void mma_32x32_k16(float acc[2][4][4], const bf16 *A, const bf16 *B, int ld, int r0,
                                                     int c0, int k0, int lane) {
    uint32_t a[2][4], b[2][4];
    lda_frag(a[0], A, ld, r0, k0, lane);
    lda_frag(a[1], A, ld, r0 + 16, k0, lane);
    ldb_pair(b[0], B, ld, c0, k0, lane);
    ldb_pair(b[1], B, ld, c0 + 16, k0, lane);
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int p = 0; p < 2; p++) {
            mma16816(acc[mi][2 * p], a[mi], b[p][0], b[p][1]);
            mma16816(acc[mi][2 * p + 1], a[mi], b[p][2], b[p][3]);
        }
}

/* the dynamic shared-memory limit is a host-side function attribute (not a stream operation, so this
 * is safe under graph capture); raised once per kernel instantiation */
template <typename K> static void attn_smem_attr(K kernel, size_t bytes, bool *done) {
    if (*done) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = true;
}

#endif
