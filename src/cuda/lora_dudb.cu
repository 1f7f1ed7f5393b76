/* lora_dudb.cu: the LoRA backward's two products of the output gradient, du_i = scale dy_i B_i and
 * dB_i += scale dy_i^T u_i, for every site of a group in ONE pass over dy. With cuBLAS they are two GEMMs
 * that each read dy (for gate/up, [N, 2I]: the largest activation of the layer) plus split and half-sum
 * kernels; here each CTA streams a [TM tokens x 64 columns] tile of dy through shared memory once and
 * feeds both products from it on tensor cores.
 *
 * Precision, as lora.cu: u and B are fp32, split into bf16 hi + lo; du = dy Bh + dy Bl and
 * dB = dy^T uh + dy^T ul accumulate in fp32 (mma.sync m16n8k16), so the result carries only dy's own
 * bf16 rounding. Deterministic: no atomics; partial sums go to a workspace in a fixed order:
 *   grid (split s, token block tb): site i = the site of split s, columns of its chunks [c0, c1) x 64;
 *   P_du [splits][n][r]   the split's share of du for its token block (summed over the site's splits),
 *   P_db [tbs][sum_out][r] the token block's share of dB (summed over token blocks),
 * and one reduce kernel sums them, scales, writes du (fp32, and optionally its [lo | hi | hi] bf16 copy
 * T3 that the dA / dx GEMMs read) and adds into dB.
 * Shapes it takes (else lora.cu uses the cuBLAS path): r in {8, 16, 32, 64}, every out_i and ld_i a
 * multiple of 8, dy 16-byte aligned. */
#include "cuda/attention_tiles.h"
#include "cuda/lora_dudb.h"

#define DUDB_THREADS 256 /* 8 warps */
#define DUDB_COLS 64     /* dy columns a chunk */
#define DUDB_LD (DUDB_COLS + 8)

typedef struct dudb_args {
    const bf16 *dy[QLT_STACK_MAX]; /* [n, ld_i] (this token chunk) */
    int64_t ld[QLT_STACK_MAX];
    int64_t out[QLT_STACK_MAX];
    const bf16 *b3[QLT_STACK_MAX]; /* [out_i, 3r]: columns [bh | bl | bh] (lora.cu's B3) */
    const float *u;                /* [n, k r] fp32 */
    int64_t ldu;
    int split0[QLT_STACK_MAX + 1]; /* splits of site i: [split0[i], split0[i+1]) */
    int cps[QLT_STACK_MAX];        /* chunks a split of site i takes */
    int64_t col0[QLT_STACK_MAX];   /* site i's first row in P_db */
    int64_t sum_out;
    int k, n;
    float *p_du, *p_db;
} dudb_args;

template <int R, int MT, int ST> struct dudb_shape {
    static constexpr int TM = MT * 16 * 8;  /* tokens a CTA: MT m-tiles for each of 8 warps */
    static constexpr int ULD = 2 * R + 8;   /* u tile row: [uh | ul | pad] */
    static constexpr int BLD = 2 * R + 8;   /* B chunk row: [bh | bl | pad] */
    static constexpr size_t DY = (size_t)TM * DUDB_LD;
    static constexpr size_t BYTES =
        sizeof(bf16) * (ST * DY + (size_t)TM * ULD + ST * (size_t)DUDB_COLS * BLD) + sizeof(float) * 64 * R;
};

/* B fragment (k rows k0..k0+15, n columns n0..n0+7) of a row-major [k][n] smem tile: ldmatrix.x2.trans */
static __device__ __forceinline__ void ldb_trans_x2(uint32_t &b0, uint32_t &b1, const bf16 *tile, int ld, int k0,
                                                    int n0, int lane) {
    const bf16 *p = tile + (k0 + (lane & 15)) * ld + n0;
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(addr));
}

template <int R, int MT, int ST>
static __global__ void __launch_bounds__(DUDB_THREADS, 1) lora_dudb_kernel(dudb_args a) {
    typedef dudb_shape<R, MT, ST> S;
    constexpr int NT = R / 8; /* n8 tiles of r */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *s_dy = (bf16 *)smem_raw;            /* ST stages [TM][DUDB_LD] */
    bf16 *s_u = s_dy + ST * S::DY;            /* [TM][ULD] */
    bf16 *s_b = s_u + (size_t)S::TM * S::ULD; /* ST stages [64][BLD] */
    float *s_red = (float *)(s_b + ST * DUDB_COLS * S::BLD); /* [64][R] */

    const int split = blockIdx.x, tb = blockIdx.y;
    int site = 0;
    while (split >= a.split0[site + 1]) site++;
    const int64_t out = a.out[site], ld = a.ld[site];
    const int n_chunks = (int)((out + DUDB_COLS - 1) / DUDB_COLS);
    const int c_begin = (split - a.split0[site]) * a.cps[site];
    const int c_end = min(n_chunks, c_begin + a.cps[site]);
    const int t0 = tb * S::TM;
    const int rows = min(S::TM, a.n - t0);
    const bf16 *dy = a.dy[site] + (int64_t)t0 * ld;
    const bf16 *b3 = a.b3[site];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

    /* the chunk's dy tile [TM][64] and B rows [64][bh | bl], zero-filled beyond the tokens and columns; one
     * cp.async group a call (an empty one past the split's last chunk, so the group count stays uniform) */
    auto load_chunk = [&](int c, int stage) {
        if (c >= c_end) {
            cp_async_commit();
            return;
        }
        bf16 *sd = s_dy + stage * S::DY;
        const int64_t col = (int64_t)c * DUDB_COLS;
        for (int idx = threadIdx.x; idx < S::TM * (DUDB_COLS / 8); idx += DUDB_THREADS) {
            int row = idx / (DUDB_COLS / 8), v = (idx % (DUDB_COLS / 8)) * 8;
            bool ok = row < rows && col + v < out;
            const bf16 *src = ok ? dy + (int64_t)row * ld + col + v : dy;
            uint32_t sa = (uint32_t)__cvta_generic_to_shared(sd + row * DUDB_LD + v);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(src), "r"(ok ? 16 : 0));
        }
        bf16 *sb = s_b + stage * DUDB_COLS * S::BLD;
        for (int idx = threadIdx.x; idx < DUDB_COLS * (2 * R / 8); idx += DUDB_THREADS) {
            int row = idx / (2 * R / 8), v = (idx % (2 * R / 8)) * 8;
            bool ok = col + row < out;
            const bf16 *src = ok ? b3 + (col + row) * 3 * R + v : b3;
            uint32_t sa = (uint32_t)__cvta_generic_to_shared(sb + row * S::BLD + v);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(src), "r"(ok ? 16 : 0));
        }
        cp_async_commit();
    };

#pragma unroll
    for (int i = 0; i < ST - 1; i++) load_chunk(c_begin + i, i);
    /* u's rows of this token block, split into [uh | ul] (fp32 -> two bf16), four values a thread a step */
    for (int idx = threadIdx.x; idx < S::TM * (R / 4); idx += DUDB_THREADS) {
        const int row = idx / (R / 4), j = (idx % (R / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row < rows) v = *(const float4 *)(a.u + (int64_t)(t0 + row) * a.ldu + site * R + j);
        const float f[4] = {v.x, v.y, v.z, v.w};
        bf16 hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            hi[e] = __float2bfloat16(f[e]);
            lo[e] = __float2bfloat16(f[e] - __bfloat162float(hi[e]));
        }
        *(uint2 *)(s_u + row * S::ULD + j) = *(const uint2 *)hi;
        *(uint2 *)(s_u + row * S::ULD + R + j) = *(const uint2 *)lo;
    }

    float du[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < NT; j++) du[m][j][0] = du[m][j][1] = du[m][j][2] = du[m][j][3] = 0.0f;
    /* dB work of this warp: 16 columns (m-tile warp & 3) over half the tokens (warp >> 2) */
    const int db_m0 = (warp & 3) * 16, db_half = warp >> 2;

    for (int c = c_begin; c < c_end; c++) {
        const int stage = (c - c_begin) % ST;
        load_chunk(c + ST - 1, (c - c_begin + ST - 1) % ST); /* its stage was last read before the barrier
                                                                  that ended the previous chunk */
        cp_async_wait<ST - 1>();
        __syncthreads();
        const bf16 *sd = s_dy + stage * S::DY;
        const bf16 *sb = s_b + stage * DUDB_COLS * S::BLD;
        /* du rows of this warp += dy [rows, 64] . (Bh + Bl) [64, R] */
#pragma unroll
        for (int k0 = 0; k0 < DUDB_COLS; k0 += 16) {
            uint32_t bh[NT][2], bl[NT][2];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                ldb_trans_x2(bh[j][0], bh[j][1], sb, S::BLD, k0, j * 8, lane);
                ldb_trans_x2(bl[j][0], bl[j][1], sb, S::BLD, k0, R + j * 8, lane);
            }
#pragma unroll
            for (int m = 0; m < MT; m++) {
                uint32_t af[4];
                lda_frag(af, sd, DUDB_LD, (warp * MT + m) * 16, k0, lane);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    mma16816(du[m][j], af, bh[j][0], bh[j][1]);
                    mma16816(du[m][j], af, bl[j][0], bl[j][1]);
                }
            }
        }
        /* dB [16 columns, R] of this warp = dy^T [16, TM/2] . (uh + ul) [TM/2, R] */
        float db[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) db[j][0] = db[j][1] = db[j][2] = db[j][3] = 0.0f;
        const int kt0 = db_half * (S::TM / 2);
#pragma unroll 4
        for (int k0 = kt0; k0 < kt0 + S::TM / 2; k0 += 16) {
            uint32_t af[4];
            lda_frag_trans(af, sd, DUDB_LD, k0, db_m0, lane);
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t b0, b1;
                ldb_trans_x2(b0, b1, s_u, S::ULD, k0, j * 8, lane);
                mma16816(db[j], af, b0, b1);
                ldb_trans_x2(b0, b1, s_u, S::ULD, k0, R + j * 8, lane);
                mma16816(db[j], af, b0, b1);
            }
        }
        /* the two token halves: the second half's warps leave theirs in s_red, the first add and store */
        if (db_half == 1) {
#pragma unroll
            for (int j = 0; j < NT; j++) {
                s_red[(db_m0 + g) * R + j * 8 + 2 * t] = db[j][0];
                s_red[(db_m0 + g) * R + j * 8 + 2 * t + 1] = db[j][1];
                s_red[(db_m0 + g + 8) * R + j * 8 + 2 * t] = db[j][2];
                s_red[(db_m0 + g + 8) * R + j * 8 + 2 * t + 1] = db[j][3];
            }
        }
        __syncthreads();
        if (db_half == 0) {
            const int64_t colg = (int64_t)c * DUDB_COLS + db_m0;
            float *p = a.p_db + ((int64_t)tb * a.sum_out + a.col0[site] + colg) * R;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int cl = g + 8 * h;
                    if (colg + cl < out) {
                        float2 v;
                        v.x = db[j][2 * h] + s_red[(db_m0 + cl) * R + j * 8 + 2 * t];
                        v.y = db[j][2 * h + 1] + s_red[(db_m0 + cl) * R + j * 8 + 2 * t + 1];
                        *(float2 *)(p + (int64_t)cl * R + j * 8 + 2 * t) = v;
                    }
                }
        }
        __syncthreads(); /* the stage and s_red are reused by the next chunk */
    }
    /* this split's du share for the block's tokens */
    float *p = a.p_du + ((int64_t)split * a.n + t0) * R;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = (warp * MT + m) * 16 + g + 8 * h;
            if (row < rows) {
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    float2 v;
                    v.x = c_begin < c_end ? du[m][j][2 * h] : 0.0f;
                    v.y = c_begin < c_end ? du[m][j][2 * h + 1] : 0.0f;
                    *(float2 *)(p + (int64_t)row * R + j * 8 + 2 * t) = v;
                }
            }
        }
}

/* du = scale sum over the site's splits (and T3 = [lo | hi | hi] of it when tok); dB_i += scale sum over
 * the token blocks. One launch for both. */
static __global__ void dudb_reduce_kernel(dudb_args a, int r, int tbs, float *du, bf16 *tok, int64_t ld_tok,
                                          float *db0, float *db1, float *db2, float scale) {
    const int64_t kr = (int64_t)a.k * r, du_total = (int64_t)a.n * kr, total = du_total + a.sum_out * r;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        if (idx < du_total) {
            const int64_t row = idx / kr;
            const int c = (int)(idx - row * kr), site = c / r, j = c - site * r;
            float v = 0.0f;
            for (int s = a.split0[site]; s < a.split0[site + 1]; s++) v += a.p_du[((int64_t)s * a.n + row) * r + j];
            v *= scale;
            du[idx] = v;
            if (tok) qlt_store_t3(tok + row * ld_tok, site, r, j, v);
        } else {
            const int64_t e = idx - du_total, col = e / r;
            const int j = (int)(e - col * r);
            int site = 0;
            while (site + 1 < a.k && col >= a.col0[site + 1]) site++;
            float v = 0.0f;
            for (int b = 0; b < tbs; b++) v += a.p_db[((int64_t)b * a.sum_out + col) * r + j];
            float *db = site == 0 ? db0 : site == 1 ? db1 : db2;
            db[(col - a.col0[site]) * r + j] += scale * v;
        }
    }
}

/* The tiling launch() below uses for rank r fits the device's shared memory (from 176 KiB at rank 8 to 238 KiB at
 * rank 64: Hopper only; elsewhere, and at rank 64, the two cuBLAS GEMMs run). */
static bool dudb_smem_fits(qlt_backend *be, int r) {
    switch (r) {
    case 8: return qlt_cuda_smem_fits(be, dudb_shape<8, 4, 2>::BYTES);
    case 16: return qlt_cuda_smem_fits(be, dudb_shape<16, 4, 2>::BYTES);
    case 32: return qlt_cuda_smem_fits(be, dudb_shape<32, 2, 3>::BYTES);
    default: return qlt_cuda_smem_fits(be, dudb_shape<64, 2, 2>::BYTES);
    }
}

template <int R, int MT, int ST> static void launch(cudaStream_t s, const dudb_args &a, dim3 grid) {
    static bool attr_done = false;
    attn_smem_attr(lora_dudb_kernel<R, MT, ST>, dudb_shape<R, MT, ST>::BYTES, &attr_done);
    lora_dudb_kernel<R, MT, ST><<<grid, DUDB_THREADS, dudb_shape<R, MT, ST>::BYTES, s>>>(a);
    CUDA_CHECK_LAUNCH();
}

/* Tokens a CTA (a multiple of 128: 8 warps of MT m16 tiles), as the launch below instantiates the kernel:
 * larger tiles for small ranks, whose rows are cheap. */
static int tokens_per_cta(int r) { return r <= 16 ? 512 : 256; }

bool qlt_cuda_lora_dudb_fits(const qlt_lora_site *sites, int k, int r) {
    if (r != 8 && r != 16 && r != 32 && r != 64) return false;
    for (int i = 0; i < k; i++)
        if (sites[i].out % 8 || sites[i].ld % 8 || ((uintptr_t)sites[i].dy & 15)) return false;
    return true;
}

bool qlt_cuda_lora_dudb(qlt_backend *be, const qlt_lora_site *sites, int k, const bf16 *const *b3, float *du,
                        bf16 *tok, int64_t ld_tok, const float *u, int64_t n, int r, float scale) {
    cuda_impl *impl = cuda_impl_of(be);
    if (!qlt_cuda_lora_dudb_fits(sites, k, r) || ((uintptr_t)u & 15) || !dudb_smem_fits(be, r)) return false;
    const int tm = tokens_per_cta(r);
    dudb_args a;
    memset(&a, 0, sizeof a);
    a.k = k;
    a.ldu = (int64_t)k * r;
    int64_t chunks_total = 0;
    for (int i = 0; i < k; i++) {
        a.out[i] = sites[i].out, a.ld[i] = sites[i].ld, a.b3[i] = b3[i];
        a.col0[i] = a.sum_out;
        a.sum_out += sites[i].out;
        chunks_total += (sites[i].out + DUDB_COLS - 1) / DUDB_COLS;
    }
    /* token chunks whose partial sums fit the product workspace: one CTA a (split, token block), as many
     * splits as keep the CTAs within one wave of the SMs (the CTAs are equal in work); each site gets
     * splits in proportion to its chunks, at least one */
    const int64_t cap = (int64_t)(impl->lora_acc_bytes / sizeof(float));
    int64_t tbs = impl->lora_dudb == 2 ? 1 : (n + tm - 1) / tm;
    int given;
    for (;;) {
        int64_t splits = impl->n_sm / tbs;
        if (splits < k) splits = k;
        if (splits > chunks_total) splits = chunks_total;
        given = 0;
        for (int i = 0; i < k; i++) {
            int64_t ch = (sites[i].out + DUDB_COLS - 1) / DUDB_COLS;
            int64_t sp = i == k - 1 ? splits - given : splits * ch / chunks_total;
            if (sp < 1) sp = 1;
            if (sp > ch) sp = ch;
            a.split0[i] = given;
            a.cps[i] = (int)((ch + sp - 1) / sp);
            given += (int)sp;
        }
        if ((int64_t)given * tbs * tm * r + tbs * a.sum_out * r <= cap) break;
        if (tbs == 1) return false;
        tbs = (tbs + 1) / 2;
    }
    a.split0[k] = given;
    for (int i = k + 1; i <= QLT_STACK_MAX; i++) a.split0[i] = given;
    a.p_du = impl->lora_acc;
    const int64_t chunk_tokens = tbs * tm;
    float *db[3] = {sites[0].db, k > 1 ? sites[1].db : NULL, k > 2 ? sites[2].db : NULL};
    for (int64_t c0 = 0; c0 < n; c0 += chunk_tokens) {
        const int64_t cn = n - c0 < chunk_tokens ? n - c0 : chunk_tokens;
        const int ctbs = (int)((cn + tm - 1) / tm);
        a.n = (int)cn;
        a.u = u + c0 * a.ldu;
        for (int i = 0; i < k; i++) a.dy[i] = (const bf16 *)sites[i].dy + c0 * sites[i].ld;
        a.p_db = impl->lora_acc + (int64_t)given * cn * r;
        dim3 grid((unsigned)given, (unsigned)ctbs);
        switch (r) {
        case 8: launch<8, 4, 2>(impl->stream, a, grid); break;
        case 16: launch<16, 4, 2>(impl->stream, a, grid); break;
        case 32: launch<32, 2, 3>(impl->stream, a, grid); break;
        default: launch<64, 2, 2>(impl->stream, a, grid); break;
        }
        const int64_t total = cn * a.ldu + a.sum_out * r;
        dudb_reduce_kernel<<<qlt_grid(total, 256), 256, 0, impl->stream>>>(
            a, r, ctbs, du + c0 * a.ldu, tok ? tok + c0 * ld_tok : NULL, ld_tok, db[0], db[1], db[2], scale);
        CUDA_CHECK_LAUNCH();
    }
    return true;
}
