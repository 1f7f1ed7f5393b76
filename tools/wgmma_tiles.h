/* wgmma_tiles.h: the Hopper warpgroup-MMA building blocks the wgmma attention kernels share
 * (attention_fwd_wgmma.cu, attention_bwd_wgmma.cu; also the NF4 GEMM experiment tools/nf4_gemm.cu):
 * wgmma.mma_async wrappers (bf16 in, fp32 accumulators), the fence / commit / wait protocol, shared-memory
 * matrix descriptors and cp.async loads into the 128-byte swizzled layout the descriptors describe. Device
 * code only for sm_90a (WGMMA_DEVICE_CODE); the files that include it compile empty kernels for other targets
 * and their hosts launch them only on compute 9.0.
 *
 * Layout (PTX ISA, "shared memory matrix layout", 128-byte swizzle): a [rows x 128] bf16 tile is two
 * column blocks of 64 (128 bytes a row), block b at b * rows * 128 bytes, row r of a block at r * 128, its
 * 16-byte chunk c at chunk c ^ (r % 8); tiles start on 1024-byte boundaries. A [rows x 64] tile is one block.
 *   K-major operand (the k dimension along the row): SBO = 1024 (the next 8 rows), LBO unused; a k16 step
 *     is +32 bytes within a block, +rows * 128 bytes to the next block.
 *   MN-major operand (M or N along the row, k down the rows): LBO = the next 64-column block, SBO = 1024
 *     (the next 8 k rows); a k16 step is +2048 bytes.
 * Accumulators of m64nNk16: thread (warp w of the warpgroup, lane = 4 g + t) holds for n8 tile j
 * d[4j .. 4j+3] = rows 16 w + g (two columns 8 j + 2 t, + 1), then row 16 w + g + 8: the mma.sync C
 * layout, tile by tile; rounded to bf16 pairwise they are the A fragments of a register-A wgmma. */
#ifndef QLT_CUDA_WGMMA_TILES_H
#define QLT_CUDA_WGMMA_TILES_H

#include "cuda/attention_tiles.h" /* pack_bf16 */

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGMMA_DEVICE_CODE 1
#endif

#ifdef WGMMA_DEVICE_CODE
/* d [64 x 128] (+)= A [64 x 16] . B [16 x 128], both from shared memory; TA / TB: A M-major / B N-major;
 * scale_d 0: d = A . B (the accumulators' old values are not read) */
template <int TA, int TB>
static __device__ __forceinline__ void wgmma_ss_n128(float d[64], uint64_t da, uint64_t db, int scale_d = 1) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}

/* d [64 x 64] += A [64 x 16] . B [16 x 64], both from shared memory; TA / TB: A M-major / B N-major */
template <int TA, int TB>
static __device__ __forceinline__ void wgmma_ss_n64(float d[32], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

/* d [64 x 256] (+)= A [64 x 16] . B [16 x 256], both from shared memory; A K-major, TB: B N-major; scale_d
 * as wgmma_ss_n128 */
template <int TB>
static __device__ __forceinline__ void wgmma_ss_n256(float d[128], uint64_t da, uint64_t db, int scale_d = 1) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, %131;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TB));
}

/* d [64 x 128] += A [64 x 16] . B [16 x 128], A from registers (the mma.sync A layout), B N-major */
static __device__ __forceinline__ void wgmma_rs_n128_tb(float d[64], const uint32_t a[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* d [64 x 256] (+)= A [64 x 16] . B [16 x 256], A from registers (the mma.sync A layout), B K-major from shared
 * memory; scale_d 0: d = A . B (the NF4 GEMM experiment tools/nf4_gemm_rs.cu: W's rows as A, x's tokens as B) */
static __device__ __forceinline__ void wgmma_rs_n256(float d[128], const uint32_t a[4], uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* generic-proxy shared-memory writes (st.shared, cp.async) made visible to the wgmma (async proxy) reads */
static __device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* registers an asynchronous MMA reads or writes stay put until the wait (the compiler cannot see it) */
static __device__ __forceinline__ void reg_fence(float *d, int n) {
    for (int i = 0; i < n; i++) asm volatile("" : "+f"(d[i])::"memory");
}
static __device__ __forceinline__ void reg_fence_u(uint32_t *d, int n) {
    for (int i = 0; i < n; i++) asm volatile("" : "+r"(d[i])::"memory");
}

/* The A fragments of a register-A wgmma from accumulators (the layout above): k16 step kk takes the n8
 * tiles 2 kk and 2 kk + 1, rounded to bf16 pairwise. acc holds 8 * KSTEPS floats. */
template <int KSTEPS> static __device__ __forceinline__ void acc_to_a_frags(uint32_t a[KSTEPS][4], const float *acc) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
        a[kk][0] = pack_bf16(acc[8 * kk + 0], acc[8 * kk + 1]);
        a[kk][1] = pack_bf16(acc[8 * kk + 2], acc[8 * kk + 3]);
        a[kk][2] = pack_bf16(acc[8 * kk + 4], acc[8 * kk + 5]);
        a[kk][3] = pack_bf16(acc[8 * kk + 6], acc[8 * kk + 7]);
    }
}

/* 128-byte-swizzle descriptor of the operand at shared address saddr; lbo / sbo in bytes */
static __device__ __forceinline__ uint64_t wgmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

/* byte offset of 16-byte chunk c (0..15) of row r in a swizzled [ROWS x 128] tile */
template <int ROWS> static __device__ __forceinline__ uint32_t sw128_offset(int r, int c) {
    return (uint32_t)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* rows [row0, row0 + ROWS) of a [seq, *] bf16 matrix (row stride `stride`, 128 columns from src) into the
 * swizzled tile at shared address dst with cp.async by NT threads; zero-filled beyond seq */
template <int ROWS, int NT>
static __device__ __forceinline__ void sw128_load_tile(uint32_t dst, const bf16 *src, int64_t stride, int row0, int seq) {
    for (int idx = threadIdx.x; idx < ROWS * 16; idx += NT) {
        const int r = idx >> 4, c = idx & 15;
        const bool ok = row0 + r < seq;
        const bf16 *g = ok ? src + (int64_t)(row0 + r) * stride + c * 8 : src;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + sw128_offset<ROWS>(r, c)), "l"(g),
                     "r"(ok ? 16 : 0));
    }
}

/* acc0 = A0 . B0^T and acc1 = A1 . B1^T (m64n64 each, over 16 KSTEPS = head_dim; overwritten, complete on
 * return): two products that share their operands' layout, as the backward's S / dP pairs. A0 / A1 are 64
 * rows and B0 / B1 64 rows of K-major 128-byte-swizzled tiles whose 64-column blocks lie a_block / b_block
 * bytes apart (the A tiles may start inside their tile, e.g. at one warpgroup's rows). */
template <int KSTEPS>
static __device__ __forceinline__ void wgmma_pair_ss_n64(float acc0[32], float acc1[32], uint32_t a0, uint32_t a1,
                                                         uint32_t a_block, uint32_t b0, uint32_t b1, uint32_t b_block) {
#pragma unroll
    for (int i = 0; i < 32; i++) acc0[i] = acc1[i] = 0.0f;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
        const uint32_t ao = (kk >> 2) * a_block + (kk & 3) * 32, bo = (kk >> 2) * b_block + (kk & 3) * 32;
        wgmma_ss_n64<0, 0>(acc0, wgmma_desc(a0 + ao, 16, 1024), wgmma_desc(b0 + bo, 16, 1024));
        wgmma_ss_n64<0, 0>(acc1, wgmma_desc(a1 + ao, 16, 1024), wgmma_desc(b1 + bo, 16, 1024));
    }
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(acc0, 32);
    reg_fence(acc1, 32);
}

/* acc [64 x 128] += A . B (complete on return), A = the 64 x 16 KSTEPS tile held in the accumulators `a`
 * (rounded pairwise to bf16 A fragments), B = 16 KSTEPS rows of an N-major 128-byte-swizzled [16 KSTEPS x
 * 128] tile at shared address b: the forward's O += P V and the dQ kernel's dQ += dS K. */
template <int KSTEPS>
static __device__ __forceinline__ void wgmma_acc_rs_n128(float acc[64], const float *a, uint32_t b) {
    uint32_t af[KSTEPS][4];
    acc_to_a_frags<KSTEPS>(af, a);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) wgmma_rs_n128_tb(acc, af[kk], wgmma_desc(b + kk * 2048, KSTEPS * 16 * 128, 1024));
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(acc, 64);
    reg_fence_u(&af[0][0], 4 * KSTEPS);
}
#endif

/* true on a compute capability 9.0 device (sm_90a code runs there only) */
bool qlt_wgmma_attention_enabled(void);

#endif
