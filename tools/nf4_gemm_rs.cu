/* nf4_gemm_rs.cu: an experiment, not part of qlora-train. It is the forward GEMM that dequantizes NF4 in its
 * mainloop, in the layout the shared-memory kernel's measurements (tools/nf4_gemm.cu) pointed to. That kernel was bound
 * by one producer warp writing bf16 tiles of W into shared memory. Here W never reaches shared memory as bf16:
 * the consumer warps build the A fragments of a register-A wgmma from the 4-bit codes.
 *
 * Computed: C^T = W . x^T, i.e. y [m, R] = x [m, cols] . W^T. W is a stack of NF4 weights [rows_i, cols] read
 * as one [R, cols] matrix (double quantization, blocksize 64).
 *
 * One CTA computes 128 rows of W (output features) x 256 tokens over k tiles of 64 (one quantization block a
 * row) with two warpgroups, no producer: 128 accumulators and two fragment sets take ~192 registers, and an SM
 * sub-partition's 16K registers hold two such warps, so a ninth (producer) warp does not fit, and setmaxnreg
 * would not help (ptxas compiles within the launch's count). Each thread issues, RS_STAGES - 1 k tiles ahead:
 *   - its 16 bytes of the tile's 4 KB of codes by cp.async;
 *   - 64 threads of each warpgroup, one W row each: the row's block table into shared memory: the 16 values bf16(mul.ftz(code, absmax)) of
 *     the row's quantization block, as lookup8 reads them (computed once a row, not by each of the 4 threads
 *     that read the row);
 *   - thread 0: the TMA load of x's [256 x 64] tile (128-byte swizzle: wgmma's K-major B operand).
 * A stage is refilled once every warp has released it (`empty`, one arrival a warp after its wgmmas). The
 * stage's `full` barrier counts 256 + 128 + 1 arrivals: each thread's asynchronous arrive when its cp.async
 * lands, a release arrive after each table store, and the TMA's transaction count.
 * Warpgroup wg multiplies W rows [64 wg, +64). For each k tile a thread needs rows g and g + 8 of its warp's
 * 16, and the k columns 2t + 8j, +1 (j = 0..7: the mma.sync A layout over four k16 steps): byte t of each
 * 4-byte word of the row's 32 code bytes in bitsandbytes' layout. The codes the kernel reads are rearranged
 * once (qlt_cuda_nf4_gemm_rs_layout) so those 8 bytes are contiguous: one 8-byte load, looked up in the row's
 * table (lookup8; the values qlt_cuda_nf4_dequantize writes) straight into the A registers. Fragments for k tile kt + 1 are built while the wgmmas of k tile kt run (two
 * register sets).
 * Epilogue: C^T's accumulators are transposed through shared memory into y's rows (16-byte stores).
 * QLT_RS_NO_BUILD=1 (a measurement, wrong values): k tile 0's fragments reused for every k tile, the kernel
 * without its dequantization, to see what the pipeline alone reaches.
 * Needs: every part's rows % 128 == 0, cols % 256 == 0 (whole 4-block groups of scale codes), 16-byte aligned
 * x and y rows, double quantization. Tokens m may be any count (TMA zero-fills, the epilogue guards). */
#include "nf4_gemm.h"

#include "nf4_wgmma_common.h"

#include <stdlib.h>
#include <string.h>

#define RS_BM 128 /* rows of W (output features) a CTA */
#define RS_BN 256 /* tokens a CTA */
#define RS_BK 64
#define RS_STAGES 4

struct rs_cfg {
    static constexpr int X_BYTES = RS_BN * RS_BK * 2;         /* x tile, 128-byte swizzled */
    static constexpr int CODE_BYTES = RS_BM * RS_BK / 2;      /* codes [128 rows x 32 bytes] */
    static constexpr int TABLE_BYTES = RS_BM * 32;            /* a row's block table: lb[4], hb[4] (lookup8) */
    static constexpr int STAGE = (X_BYTES + CODE_BYTES + TABLE_BYTES + 1023) / 1024 * 1024;
    static constexpr int THREADS = 256;
    static constexpr int EPI_PITCH = RS_BM * 2 + 16; /* bytes a token row of the transposed tile (no bank conflicts) */
    static_assert(RS_BN * EPI_PITCH <= RS_STAGES * STAGE, "the epilogue's tile reuses the stages");
    static constexpr int TABLES = QLT_NF4_GEMM_MAX_PARTS * (16 + 256) * 4;
    static constexpr int SMEM = 1024 + RS_STAGES * STAGE + 2 * RS_STAGES * 8 + TABLES;
};

struct rs_params {
    CUtensorMap x_map; /* x [m, cols] bf16 */
    nf4_part part[QLT_NF4_GEMM_MAX_PARTS];
    int nparts;
    int no_build; /* a measurement only (QLT_RS_NO_BUILD=1): k tile 0's fragments reused, wrong values */
    bf16 *y;
    int64_t ldy, m, n, k; /* y [m, n] = x [m, k] . W^T, W [n, k] */
};

#ifdef WGMMA_DEVICE_CODE
static __device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

/* The 8 A-register values (bf16 pairs) of one W row for one k tile: in the kernel's code layout (see
 * qlt_cuda_nf4_gemm_rs_layout) thread t's 8 code bytes are bytes 8t..8t+7 of the row's 32, one 8-byte load;
 * they go through the row's block table (lb, hb at `table`, written by rs_issue). out[j] holds k columns
 * 2t + 8j, +1. */
static __device__ __forceinline__ void row_fragments(uint32_t codes, uint32_t table, int t, uint32_t out[8]) {
    uint32_t w0, w1;
    uint4 l, h;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(w0), "=r"(w1) : "r"(codes + t * 8));
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(l.x), "=r"(l.y), "=r"(l.z), "=r"(l.w) : "r"(table));
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(h.x), "=r"(h.y), "=r"(h.z), "=r"(h.w) : "r"(table + 16));
    const uint32_t lb[4] = {l.x, l.y, l.z, l.w}, hb[4] = {h.x, h.y, h.z, h.w};
    const uint4 a = lookup8(w0, lb, hb), b = lookup8(w1, lb, hb);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

/* A fragments [k16 step][4] of k tile kt for rows lr0 and lr0 + 8 (after waiting for the stage) */
static __device__ __forceinline__ void build_fragments(uint32_t f[4][4], uint32_t stage, uint32_t full, uint32_t parity,
                                                       int lr0, int t) {
    mbar_wait(full, parity);
    const uint32_t codes = stage + rs_cfg::X_BYTES, tables = codes + rs_cfg::CODE_BYTES;
    uint32_t r0[8], r1[8];
    row_fragments(codes + lr0 * 32, tables + lr0 * 32, t, r0);
    row_fragments(codes + (lr0 + 8) * 32, tables + (lr0 + 8) * 32, t, r1);
#pragma unroll
    for (int s = 0; s < 4; s++) {
        f[s][0] = r0[2 * s];
        f[s][1] = r1[2 * s];
        f[s][2] = r0[2 * s + 1];
        f[s][3] = r1[2 * s + 1];
    }
}

/* What a thread issues for k tile kt into stage kt % RS_STAGES (see the top of the file); the scale codes of
 * a table thread's row come four k tiles to a 32-bit word, read a word ahead. */
struct rs_loader {
    const uint32_t *qwords;
    const float *nested;
    int64_t blk0;
    uint32_t qw, qw_next;
    float nabs, nabs_next;
    const uint8_t *codes_src; /* this thread's 16 code bytes of k tile 0 */
    int64_t codes_step;       /* bytes to the next k tile's */
    uint32_t codes_dst;       /* its offset in a stage */
    const float *ncode;
    const float *code; /* [16] the NF4 codebook (shared memory) */
    int table_row;     /* the W row whose block tables this thread writes, or -1 */
    float offset;
};

static __device__ __forceinline__ void rs_issue(rs_loader &ld, const rs_params &p, int kt, int ktiles, uint32_t base,
                                                uint32_t bars, int64_t n0) {
    const int tid = threadIdx.x, s = kt % RS_STAGES;
    const uint32_t stage = base + s * rs_cfg::STAGE, full = bars + 8 * s;
    if (tid == 0) {
        mbar_arrive_expect_tx(full, rs_cfg::X_BYTES);
        tma_load_2d(stage, &p.x_map, kt * RS_BK, (int)n0, full);
    }
    cp_async16(stage + rs_cfg::X_BYTES + ld.codes_dst, ld.codes_src + kt * ld.codes_step);
    cp_async_arrive_noinc(full);
    if (ld.table_row >= 0) {
        if (kt > 0 && (kt & 3) == 0) {
            ld.qw = ld.qw_next, ld.nabs = ld.nabs_next;
            if (kt + 4 < ktiles) {
                ld.qw_next = __ldg(ld.qwords + (kt >> 2) + 1);
                ld.nabs_next = __ldg(ld.nested + ((ld.blk0 + kt + 4) >> 8));
            }
        }
        const uint32_t q = (ld.qw >> (8 * (kt & 3))) & 0xffu;
        const float scale = __fadd_rn(ng_mul_ftz(ld.ncode[q], ld.nabs), ld.offset);
        uint32_t lb[4], hb[4];
        nf4_block_tables(ld.code, scale, lb, hb);
        const uint32_t dst = stage + rs_cfg::X_BYTES + rs_cfg::CODE_BYTES + ld.table_row * 32;
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(lb[0]), "r"(lb[1]), "r"(lb[2]), "r"(lb[3])
                     : "memory");
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + 16), "r"(hb[0]), "r"(hb[1]), "r"(hb[2]),
                     "r"(hb[3])
                     : "memory");
        mbar_arrive(full);
    }
}

/* k tile kt's four wgmmas from fragments cur; while they run, the loads of k tile kt + RS_STAGES - 1 (into the
 * stage every warp released after k tile kt - 1) and the fragments nxt of k tile kt + 1; stage kt is released
 * once the wgmmas are done. (Keeping k tile kt - 1's wgmmas in flight as well, wait_group 1 with the release
 * one step later, was tried: it was no faster and its results were wrong; not understood yet.) */
static __device__ __forceinline__ void mainloop_step(float acc[128], uint32_t (&cur)[4][4], uint32_t (&nxt)[4][4],
                                                     rs_loader &ld, const rs_params &p, int kt, int ktiles, uint32_t base,
                                                     uint32_t bars, int64_t n0, int lr0, int t) {
    const int s = kt % RS_STAGES;
    const uint32_t x_tile = base + s * rs_cfg::STAGE;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_rs_n256(acc, cur[kk], wgmma_desc(x_tile + kk * 32, 16, 1024), kt > 0 || kk > 0);
    wgmma_commit();
    const int ahead = kt + RS_STAGES - 1;
    if (ahead < ktiles) {
        if (kt > 0) mbar_wait(bars + 8 * (RS_STAGES + (kt - 1) % RS_STAGES), (uint32_t)((kt - 1) / RS_STAGES) & 1u);
        rs_issue(ld, p, ahead, ktiles, base, bars, n0);
    }
    if (kt + 1 < ktiles) {
        const int s1 = (kt + 1) % RS_STAGES;
        if (p.no_build) {
            mbar_wait(bars + 8 * s1, (uint32_t)((kt + 1) / RS_STAGES) & 1u);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) nxt[i][j] = cur[i][j];
        } else {
            build_fragments(nxt, base + s1 * rs_cfg::STAGE, bars + 8 * s1, (uint32_t)((kt + 1) / RS_STAGES) & 1u, lr0, t);
        }
    }
    wgmma_wait<0>();
    reg_fence(acc, 128);
    reg_fence_u(&cur[0][0], 16);
    if ((threadIdx.x & 31) == 0) mbar_arrive(bars + 8 * (RS_STAGES + s));
}
#endif

static __global__ void __launch_bounds__(rs_cfg::THREADS, 1) nf4_gemm_rs_kernel(const __grid_constant__ rs_params p) {
#ifdef WGMMA_DEVICE_CODE
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = (raw + 1023) & ~1023u;
    const uint32_t bars = base + RS_STAGES * rs_cfg::STAGE; /* full[s] at bars + 8 s, empty[s] after them */
    float *cb_s = reinterpret_cast<float *>(smem_raw + (bars - raw) + 2 * RS_STAGES * 8);
    float *ncode_s = cb_s + QLT_NF4_GEMM_MAX_PARTS * 16;
    const int tid = threadIdx.x;
    const int64_t n0 = (int64_t)blockIdx.x * RS_BN, m0 = (int64_t)blockIdx.y * RS_BM; /* tokens, W rows */
    int part = 0;
    for (int i = 1; i < p.nparts; i++)
        if (m0 >= p.part[i].row0) part = i;
    const nf4_part &pt = p.part[part];
    const int64_t prow0 = m0 - pt.row0; /* the tile's first row within its part */
    const int ktiles = (int)(p.k / RS_BK); /* also the quantization blocks a row: one a k tile */

    for (int i = tid; i < p.nparts * 16; i += rs_cfg::THREADS) cb_s[i] = p.part[i >> 4].code[i & 15];
    for (int i = tid; i < p.nparts * 256; i += rs_cfg::THREADS) ncode_s[i] = p.part[i >> 8].nested_code[i & 255];
    if (tid == 0) {
        for (int s = 0; s < RS_STAGES; s++) {
            mbar_init(bars + 8 * s, rs_cfg::THREADS + RS_BM + 1);
            mbar_init(bars + 8 * (RS_STAGES + s), rs_cfg::THREADS / 32);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    rs_loader ld;
    {
        const int row = tid >> 1, half = tid & 1; /* this thread's 16 code bytes: row's half */
        ld.codes_src = pt.codes + (((prow0 + row) * p.k) >> 1) + half * 16;
        ld.codes_step = RS_BK / 2;
        ld.codes_dst = (uint32_t)(row * 32 + half * 16);
        ld.ncode = ncode_s + part * 256;
        ld.code = cb_s + 16 * part;
        ld.offset = pt.offset;
        ld.nested = pt.nested_absmax;
        /* the table rows: 64 threads of each warpgroup, one row each (the work split evenly between the two) */
        ld.table_row = (tid & 127) < 64 ? (tid >> 7) * 64 + (tid & 63) : -1;
        ld.blk0 = (prow0 + (ld.table_row < 0 ? 0 : ld.table_row)) * ktiles;
        ld.qwords = reinterpret_cast<const uint32_t *>(pt.absmax_q + ld.blk0);
        ld.qw = ld.qw_next = 0u, ld.nabs = ld.nabs_next = 0.0f;
        if (ld.table_row >= 0) {
            ld.qw = __ldg(ld.qwords);
            ld.nabs = __ldg(ld.nested + (ld.blk0 >> 8));
            if (ktiles > 4) {
                ld.qw_next = __ldg(ld.qwords + 1);
                ld.nabs_next = __ldg(ld.nested + ((ld.blk0 + 4) >> 8));
            }
        }
    }
    for (int kt = 0; kt < RS_STAGES - 1 && kt < ktiles; kt++) rs_issue(ld, p, kt, ktiles, base, bars, n0);
    {
        const int cw = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
        const int lr0 = cw * 64 + 16 * w + g; /* this thread's rows lr0 and lr0 + 8 of the tile */
        float acc[128]; /* not zeroed: the first wgmma runs with scale_d 0 */
        uint32_t fa[4][4], fb[4][4];
        build_fragments(fa, base, bars, 0u, lr0, t);
        for (int kt = 0; kt < ktiles; kt += 2) { /* ktiles is even (cols % 256 == 0): no branch around a wgmma */
            mainloop_step(acc, fa, fb, ld, p, kt, ktiles, base, bars, n0, lr0, t);
            mainloop_step(acc, fb, fa, ld, p, kt + 1, ktiles, base, bars, n0, lr0, t);
        }
        /* epilogue: accumulator (W row lr0 (+8), tokens 8 j + 2 t, +1) -> tile T [256 tokens][128 rows] bf16 */
        __syncthreads(); /* both warpgroups' last wgmmas have read their stage */
        uint8_t *tile = smem_raw + (base - raw);
#pragma unroll
        for (int j = 0; j < 32; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tok = 8 * j + 2 * t + h;
                bf16 *row = reinterpret_cast<bf16 *>(tile + tok * rs_cfg::EPI_PITCH);
                row[lr0] = __float2bfloat16(acc[4 * j + h]);
                row[lr0 + 8] = __float2bfloat16(acc[4 * j + 2 + h]);
            }
        __syncthreads();
        const int ct = tid;
#pragma unroll 4
        for (int i = 0; i < RS_BN * (RS_BM / 8) / 256; i++) {
            const int idx = ct + 256 * i, tok = idx >> 4, c = idx & 15;
            if (n0 + tok >= p.m) continue;
            const uint4 v = *reinterpret_cast<const uint4 *>(tile + tok * rs_cfg::EPI_PITCH + c * 16);
            *reinterpret_cast<uint4 *>(p.y + (n0 + tok) * p.ldy + m0 + c * 8) = v;
        }
    }
#endif
}

extern "C" int qlt_cuda_nf4_gemm_rs_fwd(void *y, int64_t ldy, const void *x, int64_t ldx, int64_t m,
                                        const qlt_nf4 *const *q, const int64_t *rows, int k, int64_t cols, void *stream) {
    if (m <= 0) return 0;
    if (k < 1 || k > QLT_NF4_GEMM_MAX_PARTS || cols % 256 != 0 || !device_is_sm90() || !tensor_map_encoder())
        return qlt_fail("NF4 GEMM (register A): needs compute 9.0, 1..%d parts and cols %% 256 == 0", QLT_NF4_GEMM_MAX_PARTS);
    if (((uintptr_t)x & 15) != 0 || (ldx * 2) % 16 != 0 || ((uintptr_t)y & 15) != 0 || (ldy * 2) % 16 != 0)
        return qlt_fail("NF4 GEMM (register A): x and y need 16-byte aligned rows");
    for (int i = 0; i < k; i++)
        if (q[i]->blocksize != 64 || !q[i]->double_quant || rows[i] % RS_BM != 0 || q[i]->numel != rows[i] * cols)
            return qlt_fail("NF4 GEMM (register A): part %d must be double-quantized, blocksize 64, rows %% %d == 0", i,
                            RS_BM);
    rs_params p;
    memset(&p, 0, sizeof p);
    const int64_t total = nf4_fill_parts(p.part, q, rows, k);
    p.nparts = k;
    p.no_build = getenv("QLT_RS_NO_BUILD") && atoi(getenv("QLT_RS_NO_BUILD")) == 1;
    p.y = (bf16 *)y, p.ldy = ldy, p.m = m, p.n = total, p.k = cols;
    const CUresult r = nf4_tile_map(&p.x_map, x, ldx, m, cols, RS_BK, RS_BN);
    if (r != CUDA_SUCCESS) return qlt_fail("NF4 GEMM (register A): cuTensorMapEncodeTiled failed (%d)", (int)r);
    static bool attr_set = false;
    if (!attr_set) {
        if (cudaFuncSetAttribute(nf4_gemm_rs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, rs_cfg::SMEM) !=
            cudaSuccess)
            return qlt_fail("NF4 GEMM (register A): cannot reserve %d bytes of shared memory", rs_cfg::SMEM);
        attr_set = true;
    }
    /* tokens fastest: the CTAs of one W tile run together, so its codes are read from HBM about once (grouping
     * token tiles so x stays in L2 at 8192 tokens was measured: no faster) */
    const dim3 grid((unsigned)((m + RS_BN - 1) / RS_BN), (unsigned)(total / RS_BM));
    nf4_gemm_rs_kernel<<<grid, rs_cfg::THREADS, rs_cfg::SMEM, (cudaStream_t)stream>>>(p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        cudaFuncAttributes fa;
        memset(&fa, 0, sizeof fa);
        cudaFuncGetAttributes(&fa, nf4_gemm_rs_kernel);
        return qlt_fail("NF4 GEMM (register A): launch failed: %s (%d registers, at most %d threads a block, %d + %zu "
                        "bytes of shared memory)",
                        cudaGetErrorString(e), fa.numRegs, fa.maxThreadsPerBlock, rs_cfg::SMEM, fa.sharedSizeBytes);
    }
    return 0;
}

/* 32-byte block c of the codes (64 values, one quantization block) rearranged so the consumer thread t of a
 * quad finds its 8 bytes (bitsandbytes' bytes t, t + 4, ..., t + 28) together: new byte 8t + j = old byte t + 4j */
static __global__ void nf4_rs_layout_kernel(uint8_t *dst, const uint8_t *src, int64_t blocks) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= blocks) return;
    const uint4 a = reinterpret_cast<const uint4 *>(src)[2 * c], b = reinterpret_cast<const uint4 *>(src)[2 * c + 1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint32_t o[8];
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const uint32_t sel = (uint32_t)t | ((uint32_t)(t + 4) << 4);
        o[2 * t] = __byte_perm(__byte_perm(w[0], w[1], sel), __byte_perm(w[2], w[3], sel), 0x5410);
        o[2 * t + 1] = __byte_perm(__byte_perm(w[4], w[5], sel), __byte_perm(w[6], w[7], sel), 0x5410);
    }
    reinterpret_cast<uint4 *>(dst)[2 * c] = make_uint4(o[0], o[1], o[2], o[3]);
    reinterpret_cast<uint4 *>(dst)[2 * c + 1] = make_uint4(o[4], o[5], o[6], o[7]);
}

extern "C" int qlt_cuda_nf4_gemm_rs_layout(uint8_t *dst, const uint8_t *src, int64_t numel, void *stream) {
    if (numel % 64 != 0 || ((uintptr_t)dst & 15) != 0 || ((uintptr_t)src & 15) != 0)
        return qlt_fail("NF4 GEMM (register A): the code layout needs whole 64-value blocks and 16-byte aligned codes");
    const int64_t blocks = numel / 64;
    nf4_rs_layout_kernel<<<(unsigned)((blocks + 255) / 256), 256, 0, (cudaStream_t)stream>>>(dst, src, blocks);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : qlt_fail("NF4 GEMM (register A): layout kernel failed: %s", cudaGetErrorString(e));
}
