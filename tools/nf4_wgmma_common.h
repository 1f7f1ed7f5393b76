/* nf4_wgmma_common.h: what the two NF4-dequantizing GEMM experiments share (tools/nf4_gemm.cu, which
 * dequantizes W into shared memory on a producer warpgroup, and tools/nf4_gemm_rs.cu, which dequantizes it into
 * the registers of a register-A wgmma on the consumers): mbarriers, TMA tile loads, cp.async, setmaxnreg, the
 * NF4 block tables and byte-permute lookups, and the host's tensor-map encoder and sm_90 check. */
#ifndef QLT_TOOLS_NF4_WGMMA_COMMON_H
#define QLT_TOOLS_NF4_WGMMA_COMMON_H

#include "backend/weight.h"
#include "wgmma_tiles.h"

#include <cuda.h>
#include <cudaTypedefs.h>

/* One NF4 weight of a stack read as one matrix: its device arrays, and its first row in the stack. */
struct nf4_part {
    const uint8_t *codes;
    const float *absmax;        /* plain scales */
    const uint8_t *absmax_q;    /* nested: 8-bit codes of (absmax - offset) */
    const float *nested_absmax; /* nested: one scale per 256 blocks */
    const float *code;          /* [16] the NF4 codebook */
    const float *nested_code;   /* [256] the dynamic map (nested) */
    float offset;
    int64_t row0;
};

#ifdef WGMMA_DEVICE_CODE
static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];\n" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
template <int N> static __device__ __forceinline__ void regs_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> static __device__ __forceinline__ void regs_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
static __device__ __forceinline__ float ng_mul_ftz(float a, float b) {
    float r;
    asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
static __device__ __forceinline__ void cp_async4(uint32_t dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

/* The 16 values bf16(mul.ftz(code[i], s)) of one quantization block (s its absmax), split into low and high
 * bytes four a register (lb / hb), as lookup8 reads them: the values qlt_cuda_nf4_dequantize writes. */
static __device__ __forceinline__ void nf4_block_tables(const float *code, float s, uint32_t lb[4], uint32_t hb[4]) {
    const float4 *cb = reinterpret_cast<const float4 *>(code);
    uint32_t pk[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float4 c = cb[i];
        pk[2 * i] = pack_bf16(ng_mul_ftz(c.x, s), ng_mul_ftz(c.y, s));
        pk[2 * i + 1] = pack_bf16(ng_mul_ftz(c.z, s), ng_mul_ftz(c.w, s));
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        lb[i] = __byte_perm(pk[2 * i], pk[2 * i + 1], 0x6420);
        hb[i] = __byte_perm(pk[2 * i], pk[2 * i + 1], 0x7531);
    }
}

/* 8 codes (one 32-bit word, first value in the high nibble of byte 0) -> 8 bf16 (16 bytes) by the block's
 * byte tables: lb / hb hold the low / high bytes of the 16 values, four a register */
static __device__ __forceinline__ uint4 lookup8(uint32_t w, const uint32_t lb[4], const uint32_t hb[4]) {
    const uint32_t s3 = w & 0x77777777u;         /* entry within its half, per nibble */
    const uint32_t b3 = (w >> 1) & 0x44444444u;  /* 4 where the nibble's top bit is set */
    const uint32_t sa = s3, sb = s3 >> 16, ma = b3 | 0x3210u, mb = (b3 >> 16) | 0x3210u;
    const uint32_t lo_a = __byte_perm(__byte_perm(lb[0], lb[1], sa), __byte_perm(lb[2], lb[3], sa), ma);
    const uint32_t hi_a = __byte_perm(__byte_perm(hb[0], hb[1], sa), __byte_perm(hb[2], hb[3], sa), ma);
    const uint32_t lo_b = __byte_perm(__byte_perm(lb[0], lb[1], sb), __byte_perm(lb[2], lb[3], sb), mb);
    const uint32_t hi_b = __byte_perm(__byte_perm(hb[0], hb[1], sb), __byte_perm(hb[2], hb[3], sb), mb);
    /* nibble j of a group is value (j ^ 1) of it: values 0, 1 are nibbles 1, 0 */
    return make_uint4(__byte_perm(lo_a, hi_a, 0x4051), __byte_perm(lo_a, hi_a, 0x6273), __byte_perm(lo_b, hi_b, 0x4051),
                      __byte_perm(lo_b, hi_b, 0x6273));
}

#endif

static inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    if (!fn) {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)f;
    }
    return fn;
}

static inline bool device_is_sm90(void) {
    static int cached = -1;
    if (cached < 0) {
        int dev = 0, major = 0, minor = 0;
        cached = cudaGetDevice(&dev) == cudaSuccess &&
                 cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                 cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
                 major == 9 && minor == 0;
    }
    return cached == 1;
}

/* parts[i] from q[i] (rows[i] rows each, stacked in order); returns the stack's rows */
static inline int64_t nf4_fill_parts(nf4_part *parts, const qlt_nf4 *const *q, const int64_t *rows, int k) {
    int64_t row0 = 0;
    for (int i = 0; i < k; i++) {
        nf4_part &pt = parts[i];
        pt.codes = q[i]->codes;
        pt.absmax = q[i]->absmax;
        pt.absmax_q = q[i]->absmax_q;
        pt.nested_absmax = q[i]->nested_absmax;
        pt.code = q[i]->code;
        pt.nested_code = q[i]->nested_code;
        pt.offset = q[i]->offset;
        pt.row0 = row0;
        row0 += rows[i];
    }
    return row0;
}

/* the TMA map of a bf16 matrix [rows, cols] (row pitch ld elements) loaded in [box_rows, box_cols] tiles with the
 * 128-byte swizzle the wgmma descriptors describe */
static inline CUresult nf4_tile_map(CUtensorMap *map, const void *a, int64_t ld, int64_t rows, int64_t cols, int box_cols,
                                    int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows}, estr[2] = {1, 1};
    return tensor_map_encoder()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(a), dims, strides, box, estr,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

#endif
