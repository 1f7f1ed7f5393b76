/* nf4_gemv.cu: y [n, sum rows] = x [n, cols] . [W_0; W_1; ...]^T for NF4 weights and a few tokens
 * (n <= QLT_NF4_GEMV_MAX_TOKENS: generation's one token a step), reading the 4-bit codes once and never writing a
 * dequantized copy, so a token costs the NF4 bytes of the weights (dequantize + cuBLAS would write and read them
 * again in bf16). The weights of a stack (gate and up) are one launch, side by side in y as linear_fwd has them.
 *
 * Tensor cores do the multiply-adds. A CTA owns 16 rows of one weight and a split of 2048 columns: each of its 4
 * warps loads the codes of four chunks of 128 columns before it multiplies any (the split's x waits in shared
 * memory), so every CTA has all its bytes in flight at once, and the launch has enough CTAs to fill the GPU however
 * few rows a weight has. For a chunk, lane (g = lane / 4, t = lane % 4) loads the 16 code bytes of rows g and g + 8
 * at columns c0 + 32t .. c0 + 32t + 31
 * (one 16-byte load each, inside one quantization block since blocks hold >= 32 values), dequantizes them exactly
 * as the dequantize kernel does (code * block scale with the flush-to-zero multiply, the nested scale of double
 * quantization, rounded to bf16: the weights training and eval read) into the A fragments of eight mma.sync
 * m16n8k16, and the tokens' x values of the same columns are the B fragments. The k order inside an mma is
 * permuted (mma column 2t + j of step m is column c0 + 32t + 4m + j, j < 2, and column 2t + 8 + j is
 * c0 + 32t + 4m + 2 + j), the same permutation for A and B, so the products are the dot products of the original
 * columns. The warps' fp32 sums meet in shared memory; with several column splits each CTA writes its sums to the
 * workspace and the last CTA of a row tile to arrive (a counter per tile) adds the splits in their order, so the
 * result does not depend on timing. The bias is added and y is rounded to bf16 once. */
#include "cuda/attention_tiles.h"
#include "cuda/cuda_common.h"

#define GEMV_WARPS 4
#define GEMV_ROWS 16                                     /* rows a CTA owns (the mma's M) */
#define GEMV_CHUNK 128                                   /* columns of one chunk: 4 lanes x 32 values */
#define GEMV_WARP_CHUNKS 4                               /* chunks a warp loads at once */
#define GEMV_SPLIT_CHUNKS (GEMV_WARPS * GEMV_WARP_CHUNKS) /* chunks of a column split (one CTA) */
#define GEMV_SPLIT_COLS (GEMV_SPLIT_CHUNKS * GEMV_CHUNK)
#define GEMV_MAX_WEIGHTS 4

struct gemv_weight {
    const uint8_t *codes;       /* [rows * cols / 2] two values a byte, the first in the high nibble */
    const float *code;          /* [16] the codebook */
    const float *absmax;        /* [nblocks] (plain) */
    const uint8_t *absmax_q;    /* [nblocks] (double quantization) */
    const float *nested_absmax; /* [nested_nblocks] */
    const float *nested_code;   /* [256] */
    float offset;
    int log2_blocksize;
    int64_t rows;
    int64_t y_col;   /* first column of y this weight writes */
    int64_t first_cta; /* CTAs before this weight's (16 rows each) */
};

struct gemv_group {
    gemv_weight w[GEMV_MAX_WEIGHTS];
    int k;
    int64_t cols;
};

static __device__ __forceinline__ float gemv_mul_ftz(float a, float b) {
    float r;
    asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

template <bool NESTED>
static __device__ __forceinline__ float gemv_block_scale(const gemv_weight &w, int64_t blk) {
    if (NESTED)
        return __fadd_rn(gemv_mul_ftz(__ldg(w.nested_code + __ldg(w.absmax_q + blk)),
                                      __ldg(w.nested_absmax + blk / QLT_NF4_NESTED_BLOCKSIZE)),
                         w.offset);
    return __ldg(w.absmax + blk);
}

/* lut's entry at a byte offset (a code times 4) */
static __device__ __forceinline__ float gemv_lut(const float *lut, uint32_t offset) {
    return *reinterpret_cast<const float *>(reinterpret_cast<const char *>(lut) + offset);
}

/* the two values of byte J of a code word, dequantized and rounded to bf16, as one mma operand register (the first
 * value, the high nibble, in the low half). hi4 / lo4: the word's high / low nibbles times 4, a byte each, so one
 * byte permute gives a table offset. */
template <int J>
static __device__ __forceinline__ uint32_t gemv_pair(const float *lut, uint32_t hi4, uint32_t lo4, float s) {
    const uint32_t sel = 0x4440u | (uint32_t)J; /* byte J into byte 0, zeros above */
    return pack_bf16(gemv_mul_ftz(gemv_lut(lut, __byte_perm(hi4, 0u, sel)), s),
                     gemv_mul_ftz(gemv_lut(lut, __byte_perm(lo4, 0u, sel)), s));
}

/* What one lane holds of a chunk of 128 columns: the code bytes and block scales of its rows g and g + 8 at its 32
 * columns c0 + 32t .. (zeros past the last column or row, since every lane of the warp takes part in each mma). */
template <bool NESTED>
struct gemv_codes {
    uint4 ca, cb; /* code bytes of rows g, g + 8 */
    float sa, sb; /* their block scales */

    __device__ __forceinline__ void load(const gemv_weight &w, int64_t cols, int64_t col, int64_t ra, int64_t rb,
                                         bool has_a, bool has_b) {
        const bool in = col < cols;
        ca = cb = make_uint4(0, 0, 0, 0);
        sa = sb = 0.0f;
        if (in && has_a) {
            const int64_t f = ra * cols + col;
            ca = __ldg(reinterpret_cast<const uint4 *>(w.codes + f / 2));
            sa = gemv_block_scale<NESTED>(w, f >> w.log2_blocksize);
        }
        if (in && has_b) {
            const int64_t f = rb * cols + col;
            cb = __ldg(reinterpret_cast<const uint4 *>(w.codes + f / 2));
            sb = gemv_block_scale<NESTED>(w, f >> w.log2_blocksize);
        }
    }

    /* eight mma steps: step m takes values 4m .. 4m + 3 of the lane's 32 (code bytes 2m and 2m + 1, of word m / 2)
     * and token g's x at the same columns, xg [32] in shared memory (NULL for the lanes of tokens past n: zeros) */
    __device__ __forceinline__ void multiply(const float *lut, const bf16 *xg, float acc[4]) const {
        const uint32_t wa[4] = {ca.x, ca.y, ca.z, ca.w}, wb[4] = {cb.x, cb.y, cb.z, cb.w};
#pragma unroll
        for (int word = 0; word < 4; word++) { /* mma steps 2 word and 2 word + 1: bytes 0, 1 and 2, 3 */
            const uint4 xv = xg ? *reinterpret_cast<const uint4 *>(xg + 8 * word) : make_uint4(0, 0, 0, 0);
            const uint32_t ha = (wa[word] >> 2) & 0x3c3c3c3cu, la = (wa[word] << 2) & 0x3c3c3c3cu;
            const uint32_t hb = (wb[word] >> 2) & 0x3c3c3c3cu, lb = (wb[word] << 2) & 0x3c3c3c3cu;
            const uint32_t a0[4] = {gemv_pair<0>(lut, ha, la, sa), gemv_pair<0>(lut, hb, lb, sb),
                                    gemv_pair<1>(lut, ha, la, sa), gemv_pair<1>(lut, hb, lb, sb)};
            mma16816(acc, a0, xv.x, xv.y);
            const uint32_t a1[4] = {gemv_pair<2>(lut, ha, la, sa), gemv_pair<2>(lut, hb, lb, sb),
                                    gemv_pair<3>(lut, ha, la, sa), gemv_pair<3>(lut, hb, lb, sb)};
            mma16816(acc, a1, xv.z, xv.w);
        }
    }
};

/* grid (row tiles of every weight of the group, column splits of GEMV_SPLIT_COLS); GEMV_WARPS warps. Warp w takes
 * chunks w, w + GEMV_WARPS, ... of its split, all loaded before any is multiplied; the split's x sits in shared
 * memory. part [splits, sum rows, NT] fp32 and arrivals [row tiles] are the workspace of several splits (arrivals
 * all zero before and after a launch). */
template <bool NESTED, int NT>
static __global__ void __launch_bounds__(32 * GEMV_WARPS) nf4_gemv_kernel(bf16 *__restrict__ y, int64_t ldy,
                                                                          const bf16 *__restrict__ x,
                                                                          const __grid_constant__ gemv_group grp,
                                                                          const float *__restrict__ bias,
                                                                          float *__restrict__ part,
                                                                          unsigned *__restrict__ arrivals) {
    __shared__ float lut[16];
    __shared__ __align__(16) bf16 xtile[NT][GEMV_SPLIT_COLS];
    __shared__ float sums[GEMV_WARPS][GEMV_ROWS][NT];
    __shared__ bool last;
    int wi = 0;
    while (wi + 1 < grp.k && (int64_t)blockIdx.x >= grp.w[wi + 1].first_cta) wi++;
    const gemv_weight &w = grp.w[wi];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t cols = grp.cols, r0 = ((int64_t)blockIdx.x - w.first_cta) * GEMV_ROWS;
    const int64_t ra = r0 + g, rb = r0 + g + 8, split_c0 = (int64_t)blockIdx.y * GEMV_SPLIT_COLS;
    const bool has_a = ra < w.rows, has_b = rb < w.rows;
    gemv_codes<NESTED> ch[GEMV_WARP_CHUNKS];
#pragma unroll
    for (int k = 0; k < GEMV_WARP_CHUNKS; k++)
        ch[k].load(w, cols, split_c0 + (k * GEMV_WARPS + warp) * GEMV_CHUNK + 32 * t, ra, rb, has_a, has_b);
    if (threadIdx.x < 16) lut[threadIdx.x] = w.code[threadIdx.x];
    for (int i = threadIdx.x; i < NT * GEMV_SPLIT_COLS / 8; i += blockDim.x) { /* 8 values (16 bytes) a step */
        const int tok = i / (GEMV_SPLIT_COLS / 8), c = 8 * (i % (GEMV_SPLIT_COLS / 8));
        const int64_t gc = split_c0 + c; /* cols % 32 == 0: 8 values are all in or all out */
        *reinterpret_cast<uint4 *>(&xtile[tok][c]) =
            gc < cols ? __ldg(reinterpret_cast<const uint4 *>(x + (int64_t)tok * cols + gc)) : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const bf16 *xg = g < NT ? xtile[g] + warp * GEMV_CHUNK + 32 * t : NULL; /* token g at the lane's first chunk */
#pragma unroll
    for (int k = 0; k < GEMV_WARP_CHUNKS; k++) ch[k].multiply(lut, xg ? xg + k * GEMV_WARPS * GEMV_CHUNK : NULL, acc);
    /* C fragment: acc[j] (j < 2) is row g, token 2t + j; acc[2 + j] is row g + 8 */
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int tok = 2 * t + j;
        if (tok < NT) {
            sums[warp][g][tok] = acc[j];
            sums[warp][g + 8][tok] = acc[2 + j];
        }
    }
    __syncthreads();
    const int splits = gridDim.y;
    const int row = threadIdx.x / NT, tok = threadIdx.x % NT;
    const int64_t r = r0 + row;
    const bool mine = threadIdx.x < GEMV_ROWS * NT && r < w.rows;
    int64_t total_rows = 0;
    for (int i = 0; i < grp.k; i++) total_rows += grp.w[i].rows;
    float sum = 0.0f;
    if (mine) {
#pragma unroll
        for (int v = 0; v < GEMV_WARPS; v++) sum += sums[v][row][tok];
    }
    if (splits > 1) {
        /* this split's sums into the workspace; the tile's last CTA to arrive adds them all in split order */
        const int64_t at = w.y_col - grp.w[0].y_col + r; /* the row within the group */
        if (mine) part[((int64_t)blockIdx.y * total_rows + at) * NT + tok] = sum;
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(&arrivals[blockIdx.x], 1u) == (unsigned)splits - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        if (mine) {
            sum = 0.0f;
            for (int sp = 0; sp < splits; sp++) sum += __ldcg(part + ((int64_t)sp * total_rows + at) * NT + tok);
        }
        if (threadIdx.x == 0) arrivals[blockIdx.x] = 0u; /* ready for the next launch (and a graph's replay) */
    }
    if (mine) {
        if (bias) sum += bias[r];
        y[(int64_t)tok * ldy + w.y_col + r] = __float2bfloat16_rn(sum);
    }
}

bool qlt_cuda_nf4_gemv_applies(const qlt_weight *w, int64_t n, const void *x) {
    return n >= 1 && n <= QLT_NF4_GEMV_MAX_TOKENS && w->format == QLT_WFORMAT_NF4 && w->cols % 32 == 0 &&
           w->nf4.blocksize >= 32 && ((uintptr_t)x & 15) == 0;
}

/* one launch: grid (row tiles, column splits) */
struct gemv_launch_args {
    bf16 *y;
    int64_t ldy;
    const bf16 *x;
    const float *bias;
    float *part;
    unsigned *arrivals;
    dim3 grid;
};

template <bool NESTED, int NT>
static void gemv_launch(cudaStream_t s, const gemv_group &grp, const gemv_launch_args &a) {
    nf4_gemv_kernel<NESTED, NT><<<a.grid, 32 * GEMV_WARPS, 0, s>>>(a.y, a.ldy, a.x, grp, a.bias, a.part, a.arrivals);
    CUDA_CHECK_LAUNCH();
}

template <bool NESTED>
static void gemv_launch_n(cudaStream_t s, const gemv_group &grp, const gemv_launch_args &a, int64_t n) {
    switch (n) {
    case 1: gemv_launch<NESTED, 1>(s, grp, a); break;
    case 2: gemv_launch<NESTED, 2>(s, grp, a); break;
    case 3: gemv_launch<NESTED, 3>(s, grp, a); break;
    default: gemv_launch<NESTED, 4>(s, grp, a); break;
    }
}

void qlt_cuda_nf4_gemv(qlt_backend *be, bf16 *y, int64_t ldy, const bf16 *x, const qlt_weight *const *w, int k,
                       const float *bias, int64_t n) {
    QLT_ASSERT(k >= 1 && (bias == NULL || k == 1));
    cuda_impl *impl = cuda_impl_of(be);
    cudaStream_t s = impl->stream;
    /* groups of at most GEMV_MAX_WEIGHTS weights sharing a quantization kind, each one launch */
    int64_t y_col = 0;
    for (int i0 = 0; i0 < k;) {
        gemv_group grp = {};
        grp.cols = w[i0]->cols;
        const bool nested = w[i0]->nf4.double_quant;
        int64_t ctas = 0;
        int i = i0;
        for (; i < k && grp.k < GEMV_MAX_WEIGHTS && (bool)w[i]->nf4.double_quant == nested; i++) {
            QLT_ASSERT(qlt_cuda_nf4_gemv_applies(w[i], n, x) && w[i]->cols == grp.cols);
            const qlt_nf4 *q = &w[i]->nf4;
            gemv_weight *gw = &grp.w[grp.k++];
            *gw = {q->codes, q->code, q->absmax, q->absmax_q, q->nested_absmax, q->nested_code, q->offset, 0,
                   w[i]->rows, y_col, ctas};
            while ((1 << gw->log2_blocksize) < q->blocksize) gw->log2_blocksize++;
            ctas += (w[i]->rows + GEMV_ROWS - 1) / GEMV_ROWS;
            y_col += w[i]->rows;
        }
        const int64_t chunks = (grp.cols + GEMV_CHUNK - 1) / GEMV_CHUNK;
        const int64_t splits = (chunks + GEMV_SPLIT_CHUNKS - 1) / GEMV_SPLIT_CHUNKS;
        int64_t group_rows = 0;
        for (int j = 0; j < grp.k; j++) group_rows += grp.w[j].rows;
        QLT_ASSERT(ctas > 0 && ctas <= QLT_CUDA_GEMV_TILES && splits <= 65535 &&
                   splits * group_rows * n <= 3 * QLT_CUDA_CONV_ELEMS);
        const gemv_launch_args a = {y, ldy, x, bias, impl->conv, impl->gemv_arrivals,
                                    dim3((unsigned)ctas, (unsigned)splits)};
        if (nested) gemv_launch_n<true>(s, grp, a, n);
        else gemv_launch_n<false>(s, grp, a, n);
        i0 = i;
    }
}
