/* nf4_gemm.cu: an experiment, not part of qlora-train (the trainer dequantizes into a bf16 buffer and calls
 * cuBLAS: src/cuda/linear.cu, gemm.cu): GEMMs that dequantize NF4 in their mainloop, so no bf16 copy of W is ever
 * written to or read from global memory (the separate dequantization is ~10% of a 7B micro-batch-1 step).
 * Measured on the H100 by tools/nf4_gemm_probe.cu (docs/PERF.md, "Tried and not kept"): values as exact as
 * dequantize + cuBLAS, but 0.35-0.5x its speed, so the trainer does not use it.
 *
 * One CTA computes a [128 x BN] tile of C = A . B over k tiles of 64, with three warpgroups:
 *   warpgroup 0 (producer): for k tile kt, thread 0 asks the TMA for A's [128 x 64] tile (128-byte swizzle);
 *     all 128 threads dequantize B's [BN x 64] tile from the NF4 codes (one 64-value quantization block per
 *     unit, BN / 128 units a thread) into the same swizzled layout, then arrive on the stage's `full`
 *     barrier (count 129: 128 arrivals + the TMA's expect_tx arrival). The codes and scales reach shared
 *     memory by cp.async, NG_STAGE_AHEAD k tiles ahead (see the staging comment below).
 *   warpgroups 1, 2 (consumers): rows [64 (wg - 1), +64) of the tile; wait on `full`, four wgmma k16 steps
 *     (m64nBNk16, both operands from shared memory), and once the previous k tile's wgmmas have completed,
 *     release its stage (`empty`, one arrival per consumer warp: count 8).
 * STAGES stages of [A | B] ring through shared memory.
 *
 * The dequantization: a block's 16 possible bf16 values bf16(mul.ftz(code[i], absmax)) are computed once (16
 * multiplies) and split into low and high bytes (eight 32-bit registers); each 4-bit code then selects its
 * value with byte permutes (prmt): two 8-entry lookups and a select on the code's top bit, no memory access.
 *   B forward (C = x W^T): B's tile is W's rows [n0, n0 + BN) x k [64 kt, +64): K-major, row r at r * 128.
 *   B backward (C = dy W): B's tile is W's rows [64 kt, +64) x columns [n0, n0 + BN): N-major, 64-column
 *     blocks 8192 bytes apart, k row r at r * 128 within a block (wgmma's transposed-B form).
 * Why it is slow (ncu): the one producer warp a scheduler issues ~900 instructions a k tile with too little
 * parallelism to hide their latencies (0.3-0.4 instructions a cycle a scheduler), so the consumers wait on
 * `full`; a second producer warpgroup does not fit (512 threads leave 128 registers at launch, and ptxas
 * compiles the m64n256 wgmma's 128 accumulators within the launch count, not setmaxnreg's).
 * Needs cols % 256 == 0 (whole tiles and blocks), each part's rows % 64 == 0 (a backward k tile never
 * straddles two weights), blocksize 64. */
#include "nf4_gemm.h"

#include "nf4_wgmma_common.h"

#include <string.h>

#define NG_BM 128
#define NG_BK 64

struct ng_params {
    CUtensorMap a_map; /* A [m, k] bf16 */
    nf4_part part[QLT_NF4_GEMM_MAX_PARTS];
    int nparts, nested;
    bf16 *c;
    int64_t ldc;
    int64_t m, n, k; /* C [m, n] = A [m, k] . B [k, n] */
    int64_t wcols;   /* columns of W (forward: k; backward: n) */
    float beta;
};

/* The producer's global reads go through cp.async into a staging ring (STAGE_AHEAD k tiles deep), not into
 * registers: the proxy fence each k tile needs before its arrive would otherwise wait for every load still in
 * flight, which serialized the prefetch (measured). A slot holds, per unit and thread, the block's 32 code
 * bytes (two 16-byte halves, each half an array over the 128 threads so a warp's reads are contiguous), the
 * 4-byte word holding its 8-bit scale code (nested) or its fp32 scale, and its group's nested scale. */
#define NG_STAGE_AHEAD 3
#define NG_SLOT_UNIT_BYTES (128 * 40)

template <int BN, bool BWD> struct ng_cfg {
    static constexpr int STAGES = BN == 256 ? 4 : 6;
    static constexpr int A_BYTES = NG_BM * NG_BK * 2;
    static constexpr int B_BYTES = BN * NG_BK * 2;
    static constexpr int STAGE = A_BYTES + B_BYTES;
    static constexpr int UNITS = BN / 128; /* quantization blocks a producer thread dequantizes a k tile */
    /* one producer warpgroup and two consumers: a second producer (512 threads) leaves 128 registers at
     * launch, and ptxas compiles the consumers' m64n256 wgmma (128 accumulators) within the launch count, not
     * setmaxnreg's (it needs 154) */
    static constexpr int THREADS = 384, LAUNCH_REGS = 168;
    /* producers give back down to PROD_REGS, consumers (128 accumulators for BN 256) take up to CONS_REGS,
     * within what the producers returned */
    static constexpr int PROD_REGS = 96, CONS_REGS = 200;
    static_assert(BN == 128 || 128 * (LAUNCH_REGS - PROD_REGS) >= 256 * (CONS_REGS - LAUNCH_REGS),
                  "setmaxnreg.inc would wait forever for registers the producers never free");
    static constexpr int TABLES = QLT_NF4_GEMM_MAX_PARTS * (16 + 256) * 4;
    static constexpr int SLOT = UNITS * NG_SLOT_UNIT_BYTES;
    static constexpr int STAGING = NG_STAGE_AHEAD * SLOT;
    static constexpr int SMEM = 1024 + STAGES * STAGE + STAGING + 2 * STAGES * 8 + TABLES;
};

#ifdef WGMMA_DEVICE_CODE
static __device__ __forceinline__ int part_of(const ng_params &p, int64_t row) {
    int s = 0;
#pragma unroll
    for (int i = 1; i < QLT_NF4_GEMM_MAX_PARTS; i++)
        if (i < p.nparts && row >= p.part[i].row0) s = i;
    return s;
}

/* W's block at row `row`, columns [col, col + 64): its part, and the index of its first value in that part */
struct ng_block {
    int part;
    int64_t e;
};
static __device__ __forceinline__ ng_block block_at(const ng_params &p, int64_t row, int64_t col) {
    const int s = part_of(p, row);
    return ng_block{s, (row - p.part[s].row0) * p.wcols + col};
}

/* staging slot offsets of one unit: codes halves, scale word, nested scale */
static __device__ __forceinline__ void unit_fetch(uint32_t slot, int tid, const ng_params &p, const ng_block &b) {
    const nf4_part &pt = p.part[b.part];
    const int64_t blk = b.e >> 6;
    cp_async16(slot + tid * 16, pt.codes + (b.e >> 1));
    cp_async16(slot + 2048 + tid * 16, pt.codes + (b.e >> 1) + 16);
    if (p.nested) {
        cp_async4(slot + 4096 + tid * 4, pt.absmax_q + (blk & ~(int64_t)3));
        cp_async4(slot + 4608 + tid * 4, pt.nested_absmax + (blk >> 8));
    } else {
        cp_async4(slot + 4096 + tid * 4, pt.absmax + blk);
    }
}

/* dequantizes the staged unit (block b of W, staging slot `slot`) into 8 16-byte chunks; chunk c goes to
 * dst + off(c); a unit outside W (part < 0) stores zeros */
template <typename Off>
static __device__ __forceinline__ void unit_store(uint32_t slot, int tid, const ng_params &p, const ng_block &b,
                                                  const float *cb_s, const float *ncode_s, uint32_t dst, Off off) {
    if (b.part < 0) {
#pragma unroll
        for (int c = 0; c < 8; c++)
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst + off(c)), "r"(0u) : "memory");
        return;
    }
    uint4 w0, w1;
    uint32_t sw;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(w0.x), "=r"(w0.y), "=r"(w0.z), "=r"(w0.w) : "r"(slot + tid * 16));
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w1.x), "=r"(w1.y), "=r"(w1.z), "=r"(w1.w)
                 : "r"(slot + 2048 + tid * 16));
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(sw) : "r"(slot + 4096 + tid * 4));
    float s;
    if (p.nested) {
        float nabs;
        asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(nabs) : "r"(slot + 4608 + tid * 4));
        const uint32_t q = (sw >> (8 * ((uint32_t)(b.e >> 6) & 3u))) & 0xffu;
        s = __fadd_rn(ng_mul_ftz(ncode_s[b.part * 256 + q], nabs), p.part[b.part].offset);
    } else {
        s = __uint_as_float(sw);
    }
    uint32_t lb[4], hb[4];
    nf4_block_tables(cb_s + 16 * b.part, s, lb, hb);
    const uint32_t words[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const uint4 v = lookup8(words[c], lb, hb);
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + off(c)), "r"(v.x), "r"(v.y), "r"(v.z),
                     "r"(v.w)
                     : "memory");
    }
}

/* block of this thread's unit i for k tile kt (part -1: outside W) */
template <int BN, bool BWD>
static __device__ __forceinline__ ng_block unit_block(const ng_params &p, int tid, int64_t n0, int kt, int i) {
    constexpr int UNITS = BN / 128;
    if (!BWD) {
        const int64_t row = n0 + tid + 128 * i; /* W row = C column */
        if (row >= p.n) return ng_block{-1, 0};
        return block_at(p, row, (int64_t)kt * NG_BK);
    }
    const int64_t row = (int64_t)kt * NG_BK + (tid >> 1);
    const int64_t col = n0 + 64 * ((tid & 1) * UNITS + i);
    if (col >= p.n) return ng_block{-1, 0};
    return block_at(p, row, col);
}

/* producer thread t (0..127) owns units i (i < UNITS) of the tile */
template <int BN, bool BWD>
static __device__ __forceinline__ void producer_fetch(const ng_params &p, int t, int64_t n0, int kt, uint32_t slot) {
#pragma unroll
    for (int i = 0; i < BN / 128; i++) {
        const ng_block b = unit_block<BN, BWD>(p, t, n0, kt, i);
        if (b.part >= 0) unit_fetch(slot + i * NG_SLOT_UNIT_BYTES, t, p, b);
    }
}

template <int BN, bool BWD>
static __device__ __forceinline__ void producer_store(const ng_params &p, int t, int64_t n0, int kt, uint32_t slot,
                                                      uint32_t b_tile, const float *cb_s, const float *ncode_s) {
    constexpr int UNITS = BN / 128;
#pragma unroll
    for (int i = 0; i < UNITS; i++) {
        const ng_block b = unit_block<BN, BWD>(p, t, n0, kt, i);
        const uint32_t us = slot + i * NG_SLOT_UNIT_BYTES;
        if (!BWD) {
            const int r = t + 128 * i;
            unit_store(us, t, p, b, cb_s, ncode_s, b_tile + r * 128, [r](int c) { return (uint32_t)((c ^ (r & 7)) << 4); });
        } else {
            const int r = t >> 1, blk = (t & 1) * UNITS + i;
            unit_store(us, t, p, b, cb_s, ncode_s, b_tile + blk * (NG_BK * 128) + r * 128,
                       [r](int c) { return (uint32_t)((c ^ (r & 7)) << 4); });
        }
    }
}

template <int BN>
static __device__ __forceinline__ void consumer_mma(float *acc, uint64_t da, uint64_t db, int scale_d) {
    if constexpr (BN == 256) wgmma_ss_n256<0>(acc, da, db, scale_d);
    else wgmma_ss_n128<0, 0>(acc, da, db, scale_d);
}
template <int BN>
static __device__ __forceinline__ void consumer_mma_t(float *acc, uint64_t da, uint64_t db, int scale_d) {
    if constexpr (BN == 256) wgmma_ss_n256<1>(acc, da, db, scale_d);
    else wgmma_ss_n128<0, 1>(acc, da, db, scale_d);
}
#endif

template <int BN, bool BWD>
static __global__ void __launch_bounds__(ng_cfg<BN, BWD>::THREADS, 1) nf4_gemm_kernel(const __grid_constant__ ng_params p) {
#ifdef WGMMA_DEVICE_CODE
    using cfg = ng_cfg<BN, BWD>;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t base = (raw + 1023) & ~1023u;
    uint8_t *gbase = smem_raw + (base - raw);
    const uint32_t staging = base + cfg::STAGES * cfg::STAGE;
    const uint32_t bars = staging + cfg::STAGING; /* full[s] at bars + 8 s, empty[s] after them */
    float *cb_s = reinterpret_cast<float *>(gbase + (bars - base) + 2 * cfg::STAGES * 8);
    float *ncode_s = cb_s + QLT_NF4_GEMM_MAX_PARTS * 16;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int64_t m0 = (int64_t)blockIdx.x * NG_BM, n0 = (int64_t)blockIdx.y * BN;
    const int ktiles = (int)(p.k / NG_BK);

    for (int i = tid; i < p.nparts * 16; i += cfg::THREADS) cb_s[i] = p.part[i >> 4].code[i & 15];
    if (p.nested)
        for (int i = tid; i < p.nparts * 256; i += cfg::THREADS) ncode_s[i] = p.part[i >> 8].nested_code[i & 255];
    if (tid == 0) {
        for (int s = 0; s < cfg::STAGES; s++) {
            mbar_init(bars + 8 * s, 129);
            mbar_init(bars + 8 * (cfg::STAGES + s), 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        if constexpr (BN == 256) regs_dec<cfg::PROD_REGS>();
#pragma unroll
        for (int d = 0; d < NG_STAGE_AHEAD - 1; d++) {
            if (d < ktiles) producer_fetch<BN, BWD>(p, tid, n0, d, staging + d * cfg::SLOT);
            cp_async_commit();
        }
        for (int kt = 0; kt < ktiles; kt++) {
            const int s = kt % cfg::STAGES;
            const uint32_t phase = (uint32_t)(kt / cfg::STAGES) & 1u;
            const int ahead = kt + NG_STAGE_AHEAD - 1;
            if (ahead < ktiles) producer_fetch<BN, BWD>(p, tid, n0, ahead, staging + (ahead % NG_STAGE_AHEAD) * cfg::SLOT);
            cp_async_commit();
            cp_async_wait<NG_STAGE_AHEAD - 1>(); /* k tile kt's group (this thread's copies) has landed */
            mbar_wait(bars + 8 * (cfg::STAGES + s), phase ^ 1u);
            const uint32_t a_tile = base + s * cfg::STAGE, b_tile = a_tile + cfg::A_BYTES;
            if (tid == 0) {
                mbar_arrive_expect_tx(bars + 8 * s, cfg::A_BYTES);
                tma_load_2d(a_tile, &p.a_map, kt * NG_BK, (int)m0, bars + 8 * s);
            }
            producer_store<BN, BWD>(p, tid, n0, kt, staging + (kt % NG_STAGE_AHEAD) * cfg::SLOT, b_tile, cb_s, ncode_s);
            fence_proxy_async();
            mbar_arrive(bars + 8 * s);
        }
    } else {
        if constexpr (BN == 256) regs_inc<cfg::CONS_REGS>();
        float acc[BN / 2]; /* not zeroed: the first wgmma runs with scale_d 0 (zeroing them here would make ptxas
                            * serialize the wgmmas) */
        const uint32_t a_rows = (uint32_t)(wg - 1) * 64 * 128;
        for (int kt = 0; kt < ktiles; kt++) {
            const int s = kt % cfg::STAGES;
            mbar_wait(bars + 8 * s, (uint32_t)(kt / cfg::STAGES) & 1u);
            const uint32_t a_tile = base + s * cfg::STAGE, b_tile = a_tile + cfg::A_BYTES;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < NG_BK / 16; kk++) {
                const uint64_t da = wgmma_desc(a_tile + a_rows + kk * 32, 16, 1024);
                const int scale_d = kt > 0 || kk > 0;
                if (!BWD) consumer_mma<BN>(acc, da, wgmma_desc(b_tile + kk * 32, 16, 1024), scale_d);
                else consumer_mma_t<BN>(acc, da, wgmma_desc(b_tile + kk * 2048, NG_BK * 128, 1024), scale_d);
            }
            wgmma_commit();
            wgmma_wait<1>();
            if (kt > 0 && (tid & 31) == 0) mbar_arrive(bars + 8 * (cfg::STAGES + (kt - 1) % cfg::STAGES));
        }
        wgmma_wait<0>();
        reg_fence(acc, BN / 2);
        /* epilogue: accumulator (row 16 w + g (+8), columns 8 j + 2 t, +1) of this warpgroup's 64 rows */
        const int w = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
        const int64_t row_a = m0 + (wg - 1) * 64 + 16 * w + g;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            const int64_t col = n0 + 8 * j + 2 * t;
            if (col >= p.n) continue;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t row = row_a + 8 * h;
                if (row >= p.m) continue;
                float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
                __nv_bfloat162 *dst = reinterpret_cast<__nv_bfloat162 *>(p.c + row * p.ldc + col);
                if (p.beta != 0.0f) {
                    const float2 old = __bfloat1622float2(*dst);
                    v0 = fmaf(p.beta, old.x, v0);
                    v1 = fmaf(p.beta, old.y, v1);
                }
                *dst = __floats2bfloat162_rn(v0, v1);
            }
        }
    }
#endif
}

/* ---- host ---- */

extern "C" int qlt_cuda_nf4_gemm_ok(const qlt_nf4 *const *q, const int64_t *rows, int k, int64_t cols) {
    if (k < 1 || k > QLT_NF4_GEMM_MAX_PARTS || cols <= 0 || cols % 256 != 0 || !device_is_sm90() || !tensor_map_encoder())
        return 0;
    for (int i = 0; i < k; i++) {
        if (q[i]->blocksize != 64 || rows[i] <= 0 || rows[i] % 64 != 0 || q[i]->numel != rows[i] * cols) return 0;
        if (q[i]->double_quant != q[0]->double_quant || ((uintptr_t)q[i]->codes & 15) != 0) return 0;
    }
    return 1;
}

/* fills p's parts, A map and shape; C [m, n] = A [m, kdim] . B */
static int ng_setup(ng_params &p, const void *a, int64_t lda, int64_t m, int64_t kdim, int64_t n,
                    const qlt_nf4 *const *q, const int64_t *rows, int k, int64_t cols) {
    if (!qlt_cuda_nf4_gemm_ok(q, rows, k, cols))
        return qlt_fail("NF4 GEMM: this weight stack is not one the fused kernels take (see qlt_cuda_nf4_gemm_ok)");
    if (((uintptr_t)a & 15) != 0 || (lda * 2) % 16 != 0 || kdim % NG_BK != 0)
        return qlt_fail("NF4 GEMM: A must be 16-byte aligned with a 16-byte row pitch and k %% 64 == 0");
    memset(&p, 0, sizeof p);
    nf4_fill_parts(p.part, q, rows, k);
    p.nparts = k;
    p.nested = q[0]->double_quant;
    p.m = m, p.n = n, p.k = kdim, p.wcols = cols;
    const CUresult r = nf4_tile_map(&p.a_map, a, lda, m, kdim, NG_BK, NG_BM);
    if (r != CUDA_SUCCESS) return qlt_fail("NF4 GEMM: cuTensorMapEncodeTiled failed (%d)", (int)r);
    return 0;
}

template <int BN, bool BWD> static int ng_launch(const ng_params &p, cudaStream_t stream) {
    using cfg = ng_cfg<BN, BWD>;
    static bool attr_set = false;
    if (!attr_set) {
        if (cudaFuncSetAttribute(nf4_gemm_kernel<BN, BWD>, cudaFuncAttributeMaxDynamicSharedMemorySize, cfg::SMEM) !=
            cudaSuccess)
            return qlt_fail("NF4 GEMM: cannot reserve %d bytes of shared memory", cfg::SMEM);
        attr_set = true;
    }
    const dim3 grid((unsigned)((p.m + NG_BM - 1) / NG_BM), (unsigned)((p.n + BN - 1) / BN));
    nf4_gemm_kernel<BN, BWD><<<grid, cfg::THREADS, cfg::SMEM, stream>>>(p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return qlt_fail("NF4 GEMM: launch failed: %s", cudaGetErrorString(e));
    return 0;
}

/* tiles of 256 columns unless that leaves most SMs idle in the last wave */
static int pick_bn(int bn, int64_t m, int64_t n) {
    if (bn == 128 || bn == 256) return bn;
    const int64_t tiles256 = ((m + NG_BM - 1) / NG_BM) * ((n + 255) / 256);
    return tiles256 >= 4 * 132 ? 256 : 128;
}

extern "C" int qlt_cuda_nf4_gemm_fwd(void *y, int64_t ldy, const void *x, int64_t ldx, int64_t m, const qlt_nf4 *const *q,
                                     const int64_t *rows, int k, int64_t cols, int bn, void *stream) {
    if (m <= 0) return 0;
    int64_t total = 0;
    for (int i = 0; i < k; i++) total += rows[i];
    ng_params p;
    if (ng_setup(p, x, ldx, m, cols, total, q, rows, k, cols) != 0) return -1;
    p.c = (bf16 *)y, p.ldc = ldy, p.beta = 0.0f;
    return pick_bn(bn, m, total) == 256 ? ng_launch<256, false>(p, (cudaStream_t)stream)
                                        : ng_launch<128, false>(p, (cudaStream_t)stream);
}

extern "C" int qlt_cuda_nf4_gemm_bwd(void *dx, int64_t lddx, const void *dy, int64_t lddy, int64_t m,
                                     const qlt_nf4 *const *q, const int64_t *rows, int k, int64_t cols, float beta, int bn,
                                     void *stream) {
    if (m <= 0) return 0;
    int64_t total = 0;
    for (int i = 0; i < k; i++) total += rows[i];
    ng_params p;
    if (ng_setup(p, dy, lddy, m, total, cols, q, rows, k, cols) != 0) return -1;
    p.c = (bf16 *)dx, p.ldc = lddx, p.beta = beta;
    return pick_bn(bn, m, cols) == 256 ? ng_launch<256, true>(p, (cudaStream_t)stream)
                                       : ng_launch<128, true>(p, (cudaStream_t)stream);
}
