/* cuda_common.h: what every CUDA op file of the backend shares: the backend-private state (stream,
 * cuBLAS handles, fixed workspaces), the one checking macro for CUDA and cuBLAS, bf16 helpers, and the
 * internal entry points each src/cuda/<op>.cu provides to backend_cuda.cu.
 *
 * Conventions: activations are __nv_bfloat16 (bf16) device arrays; float* are fp32. Every op enqueues
 * work on impl->stream only, never allocates and never synchronizes. Any scratch an op needs lives in
 * buffers allocated at create/weight_create time (fixed sizes below; ops loop over token chunks so the
 * sizes never depend on the batch). Included only from .cu files (C++). */
#ifndef QLT_CUDA_COMMON_H
#define QLT_CUDA_COMMON_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "backend/backend.h"
#include "common/error.h"
}

typedef __nv_bfloat16 bf16;

/* A failed CUDA or cuBLAS call: with be->fault_unwind 0 (every command but train) it prints the failing
 * statement, file and line and aborts, as an op has no way to return an error; with 1 the first failure is
 * recorded for fault_state (an allocation failure with the context still answering is recoverable, anything
 * else sticky) and the calls go on, the optimizer ops doing nothing from then on (backend_cuda.cu). */
void qlt_cuda_fail_call(int cuda_error, int cublas_status, const char *stmt, const char *file, int line);
/* 1 once a failure has been recorded (host side, no synchronization). */
int qlt_cuda_faulted(void);
#define CUDA_CHECK(stmt)                                                                                   \
    do {                                                                                                   \
        cudaError_t err_ = (stmt);                                                                         \
        if (err_ != cudaSuccess) qlt_cuda_fail_call((int)err_, 0, #stmt, __FILE__, __LINE__);            \
    } while (0)
#define CUBLAS_CHECK(stmt)                                                                                 \
    do {                                                                                                   \
        cublasStatus_t st_ = (stmt);                                                                       \
        if (st_ != CUBLAS_STATUS_SUCCESS) qlt_cuda_fail_call(0, (int)st_, #stmt, __FILE__, __LINE__);    \
    } while (0)
/* After every kernel launch (launch-configuration errors only: no synchronization). */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

/* Fixed workspace sizes (bytes). */
#define QLT_CUDA_CONV_ELEMS ((int64_t)8 << 20)      /* each of the 3 backward_a conversion regions, fp32 elems */
#define QLT_CUDA_LORA_BYTES ((size_t)64 << 20)      /* LoRA bf16 hi/lo operand copies (initial; grown at load) */
#define QLT_CUDA_LORA_ACC_BYTES ((size_t)64 << 20)  /* LoRA fp32 [hi | lo] products (initial; grown at load) */
#define QLT_CUDA_NORM_BLOCKS 512                     /* grad_norm_sq partial sums (fixed: deterministic) */

/* a bias (fp32, the model's) and its bf16 copy for the cuBLASLt epilogue */
typedef struct cuda_bias_copy {
    const float *f32;
    bf16 *bf;
    int64_t n;
} cuda_bias_copy;

/* Memory planning (backend.h, plan_begin / plan_end): allocations are counted, never made. */
typedef struct cuda_plan {
    int on;
    uintptr_t next;              /* the next fake address handed out */
    size_t live, peak;           /* bytes "allocated" while planning: now, and at most */
    int64_t dequant_elems;       /* the dequantization scratch the planned load would grow to */
    size_t lora_ws_bytes, lora_acc_bytes; /* the LoRA workspaces likewise */
} cuda_plan;

typedef struct cuda_impl {
    int device;
    int n_sm;
    int cc_major, cc_minor; /* compute capability the kernels are chosen for (QLT_CUDA_CAPABILITY may lower it) */
    size_t smem_optin;      /* dynamic shared memory a block may opt into on that capability, bytes */
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    float *conv;           /* [3 * QLT_CUDA_CONV_ELEMS] backward_a fp16/fp32 operands + fp32 accumulator;
                              also the staging area of weight_create */
    void *lora_ws;         /* [lora_ws_bytes] */
    float *lora_acc;       /* [lora_acc_bytes] */
    size_t lora_ws_bytes, lora_acc_bytes; /* grown by lora_group_prepare at load, never in a step */
    int lora_dudb;         /* qlt_cuda_set_lora_dudb's mode */
    double *partials;      /* [QLT_CUDA_NORM_BLOCKS] */
    unsigned *gemv_arrivals; /* [QLT_CUDA_GEMV_TILES] nf4_gemv.cu: a row tile's finished column splits (zero between
                              * launches) */
    float *amax;           /* [2] fp16 overflow guard: max|dY|, max|W| (as float bits, atomicMax on int) */
    bf16 *dequant;         /* NF4 dequantization scratch, [dequant_elems] (grown in weight_create only) */
    int64_t dequant_elems;
    size_t mem_current, mem_peak; /* bytes through alloc + weights + workspaces */
    cuda_plan plan;
    /* profiling (bench): an event at every phase change; elapsed times summed per phase on read */
    int profiling;
    qlt_phase phase;
    cudaEvent_t *events;   /* [QLT_CUDA_PROFILE_EVENTS] */
    qlt_phase *event_phase; /* phase that starts at events[i] */
    int n_events;
    double phase_ms[QLT_PHASE_COUNT];
    cudaEvent_t marks[QLT_BACKEND_EVENTS]; /* event_record / event_wait */
    struct lt_bias_plan *bias_plans;      /* bias.cu: cuBLASLt GEMM + bias plans, one a shape */
    int n_bias_plans;
    cuda_bias_copy *bias_copies;          /* bias.cu: bf16 copies of the biases (bias_prepare) */
    int n_bias_copies, cap_bias_copies;
    struct qlt_clock_monitor *monitor;    /* clock_monitor.cu: sampling between clock_monitor on / off */
    struct qlt_cudnn_attn *cudnn;         /* attention_cudnn.cpp: NULL when cuDNN is not built in or not loaded */
    struct qlt_cuda_weight_cache *wcache; /* weight_cache.cu: weights kept dequantized (NULL until first used) */
} cuda_impl;

#define QLT_CUDA_PROFILE_EVENTS 8192

static inline cuda_impl *cuda_impl_of(qlt_backend *be) { return (cuda_impl *)be->impl; }

/* 1 when a kernel asking for `bytes` of dynamic shared memory can launch on this device (as the capability it
 * behaves as): launchers whose fastest tiling does not fit pick a smaller one. */
static inline int qlt_cuda_smem_fits(qlt_backend *be, size_t bytes) { return bytes <= cuda_impl_of(be)->smem_optin; }

/* Eight bf16 values as one 16-byte word <-> fp32 (the vectorized elementwise and norm kernels). */
static __device__ __forceinline__ void qlt_bf16x8_unpack(uint4 raw, float f[8]) {
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 v = __bfloat1622float2(h[j]);
        f[2 * j] = v.x;
        f[2 * j + 1] = v.y;
    }
}

static __device__ __forceinline__ uint4 qlt_bf16x8_pack(const float f[8]) {
    uint4 raw;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&raw;
#pragma unroll
    for (int j = 0; j < 4; j++) h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    return raw;
}

/* element j of site `site` of a T3 row (lora.cu's token operand: per site [lo | hi | hi] of an fp32 value, r
 * wide each, hi = bf16(v), lo = bf16(v - hi)) */
static __device__ __forceinline__ void qlt_store_t3(bf16 *row, int site, int r, int j, float v) {
    const bf16 hi = __float2bfloat16(v), lo = __float2bfloat16(v - __bfloat162float(hi));
    bf16 *o = row + (int64_t)site * 3 * r + j;
    o[0] = lo;
    o[r] = hi;
    o[2 * r] = hi;
}

/* grid size for n items in blocks of `threads`, capped for grid-stride loops */
static inline unsigned qlt_grid(int64_t n, int threads, int64_t cap = 65535LL * 32) {
    int64_t g = (n + threads - 1) / threads;
    if (g < 1) g = 1;
    if (g > cap) g = cap;
    return (unsigned)g;
}

/* ---- internal entry points, by the file that defines them ---- */

/* backend_cuda.cu: tracked device allocation used for weights and workspaces */
void *qlt_cuda_alloc_tracked(qlt_backend *be, size_t bytes);
void qlt_cuda_free_tracked(qlt_backend *be, void *p, size_t bytes);
/* Counts memory allocated elsewhere (NF4 arrays) in the report: + on allocation, - on free. */
void qlt_cuda_track(qlt_backend *be, int64_t bytes);

/* clock_monitor.cu: samples device's SM clock, power and power-cap throttling on a thread until stop (NULL
 * when NVML is not there); stop fills *out (may be NULL) and frees the monitor */
typedef struct qlt_clock_monitor qlt_clock_monitor;
qlt_clock_monitor *qlt_cuda_clock_monitor_start(int device);
void qlt_cuda_clock_monitor_stop(qlt_clock_monitor *m, qlt_clock_report *out);

/* gemm.cu: row-major C[M,N] = alpha op(A) op(B) + beta C on impl->stream, fp32 accumulation */
void qlt_cuda_gemm(qlt_backend *be, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const void *a, cudaDataType_t ta, int64_t lda, const void *b, cudaDataType_t tb, int64_t ldb,
                   float beta, void *c, cudaDataType_t tc, int64_t ldc);

/* bias.cu: a bias fused into its GEMM through cuBLASLt */
int qlt_cuda_bias_prepare(qlt_backend *be, const float *bias, int64_t n);
/* Drops (and frees) the bf16 copy of bias if there is one: called when any allocation is freed. */
void qlt_cuda_bias_forget(qlt_backend *be, const float *bias);
/* y [n, rows] = beta y + x [n, cols] . w [rows, cols]^T + bias through cuBLASLt (beta 0 or 1); false when the
 * bias has no bf16 copy or cuBLASLt has no plan for the shape (the caller falls back to GEMM + bias add) */
bool qlt_cuda_gemm_bias(qlt_backend *be, bf16 *y, const bf16 *x, const bf16 *w, const float *bias, int64_t n,
                        int64_t rows, int64_t cols, float beta);
/* Frees the cuBLASLt plans and bias copies (backend destroy). */
void qlt_cuda_bias_release(qlt_backend *be);

/* weights.cu: the frozen weights' lifecycle */
int qlt_cuda_weight_create(qlt_backend *be, qlt_weight *w, const void *host, qlt_dtype dtype, int64_t rows,
                           int64_t cols, int nf4_blocksize, int double_quant);
/* a bitsandbytes NF4 weight (host) uploaded as is */
int qlt_cuda_weight_from_nf4(qlt_backend *be, qlt_weight *w, qlt_nf4 *host, int64_t rows, int64_t cols);
void qlt_cuda_weight_free(qlt_backend *be, qlt_weight *w);
/* the weight as bf16 [rows, cols]: its data, a weight_cache.cu entry, or NF4 dequantized into impl->dequant
 * (stream-ordered) */
const bf16 *qlt_cuda_weight_bf16(qlt_backend *be, const qlt_weight *w);
/* grows impl->dequant to numel bf16 values (load time only) */
int qlt_cuda_reserve_dequant(qlt_backend *be, int64_t numel);

/* weight_stack.cu: k weights with the same cols read as one matrix */
int qlt_cuda_weight_stack_prepare(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols);
/* The stack as one bf16 [*rows, cols] matrix with row stride *ld >= ld_min (ld_min >= cols; in: ld_min, out:
 * the stride): a single bf16 weight as it is (ld_min == cols), a weight_cache.cu entry, or the weights
 * dequantized (NF4) or copied (bf16) side by side into impl->dequant with stride ld_min. Columns cols..*ld-1
 * are the caller's: left as they were (stream-ordered). */
const bf16 *qlt_cuda_stack_bf16(qlt_backend *be, const qlt_weight *const *w, int k, int64_t *ld, int64_t *rows);
/* The stack's weights into dst [sum rows, ld] side by side, columns 0..cols-1 (stream-ordered): NF4 dequantized
 * (charged to the dequant phase), bf16 copied */
void qlt_cuda_stack_fill(qlt_backend *be, bf16 *dst, const qlt_weight *const *w, int k, int64_t ld);
/* The stack as bf16 [*rows, cols] (stride cols: NF4 dequantized, bf16 copied, whatever k is; a weight_cache.cu
 * entry or impl->dequant) with room for extra_rows more rows after it, which the caller fills (stream-ordered;
 * the room was reserved at load). */
bf16 *qlt_cuda_stack_bf16_room(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_rows, int64_t *rows);

/* weight_cache.cu (be->dequant_cache_bytes): the stack's entry ([rows + room, *ld] bf16, stride >= ld_min, or
 * == ld_min with ld_exact, at least extra_rows of room after the weights), made and filled on first use outside
 * a capture while the budget lasts; NULL: not cached */
bf16 *qlt_cuda_cache_stack(qlt_backend *be, const qlt_weight *const *w, int k, int64_t ld_min, int ld_exact,
                           int64_t extra_rows, int64_t *ld);
/* the extra columns a stack's entries get (weight_stack_prepare) */
void qlt_cuda_cache_announce(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols);
void qlt_cuda_cache_drop(qlt_backend *be, const qlt_weight *w); /* the entries holding w (weight_free) */
int64_t qlt_cuda_cache_bytes(qlt_backend *be);
void qlt_cuda_cache_release(qlt_backend *be);

/* nf4_gemv.cu: y [n, sum rows] (row stride ldy) = x [n, cols] . [W_0; ...; W_k-1]^T (+ bias [rows], k == 1) for NF4
 * weights of the same cols and at most QLT_NF4_GEMV_MAX_TOKENS tokens, reading the codes once (generation);
 * applies (to each weight) when cols % 32 == 0, the blocks hold >= 32 values and x is 16-byte aligned */
#define QLT_NF4_GEMV_MAX_TOKENS 4
#define QLT_CUDA_GEMV_TILES 65536 /* row tiles of 16 one GEMV launch may have */
bool qlt_cuda_nf4_gemv_applies(const qlt_weight *w, int64_t n, const void *x);
void qlt_cuda_nf4_gemv(qlt_backend *be, bf16 *y, int64_t ldy, const bf16 *x, const qlt_weight *const *w, int k,
                       const float *bias, int64_t n);

/* linear.cu: the frozen-weight products (a few tokens on NF4 weights: nf4_gemv.cu) */
void qlt_cuda_linear_fwd(qlt_backend *be, void *y, const void *x, const qlt_weight *const *w, int k, const float *bias,
                         int64_t n);
/* linear_fwd onto what y holds: y = beta y + x [W_0; ...]^T (+ bias), beta 0 or 1 (the bias and beta y added to
 * the fp32 accumulator before y's one rounding) */
void qlt_cuda_linear_fwd_onto(qlt_backend *be, void *y, const void *x, const qlt_weight *const *w, int k,
                              const float *bias, int64_t n, float beta);
void qlt_cuda_linear_bwd_x(qlt_backend *be, void *dx, const void *dy, const qlt_weight *const *w, int k, int64_t n,
                           float beta);
void qlt_cuda_logits(qlt_backend *be, float *out, const void *x, const qlt_weight *w, int64_t n);

/* lora.cu */
void qlt_cuda_lora_fwd(qlt_backend *be, const qlt_lora_site *sites, int k, float *u, const void *x, int64_t n,
                       int64_t in, int r, float scale);
void qlt_cuda_lora_bwd(qlt_backend *be, const qlt_lora_site *sites, int k, float *scratch, const float *u,
                       const void *x, void *dx, float dx_beta, int64_t n, int64_t in, int r, float scale);
void qlt_cuda_linear_lora_fwd(qlt_backend *be, void *y, float *u, const void *x, const qlt_weight *const *w, int k,
                              const float *const *bias, const qlt_lora_site *sites, int64_t n, int r, float scale);
void qlt_cuda_linear_lora_bwd(qlt_backend *be, void *dx, float dx_beta, const qlt_weight *const *w, int k, int stacked,
                              const qlt_lora_site *sites, float *scratch, const float *u, const void *x, int64_t n,
                              int r, float scale);
int qlt_cuda_lora_group_prepare(qlt_backend *be, int k, int64_t in, const int64_t *outs, int r);

/* embed.cu, rope.cu, swiglu.cu, add_copy.cu, dropout.cu */
void qlt_cuda_embed(qlt_backend *be, void *x, const int32_t *ids, const qlt_weight *emb, int64_t n);
void qlt_cuda_rope(qlt_backend *be, void *x, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                   int head_dim, int inverse);
void qlt_cuda_swiglu_fwd(qlt_backend *be, void *h, const void *gu, int64_t n, int64_t inter);
void qlt_cuda_swiglu_bwd(qlt_backend *be, void *dgu, const void *dh, const void *gu, int64_t n, int64_t inter);
void qlt_cuda_copy(qlt_backend *be, void *out, const void *x, int64_t count);
void qlt_cuda_add(qlt_backend *be, void *out, const void *a, const void *b, int64_t count);
void qlt_cuda_zero(qlt_backend *be, void *p, size_t bytes);
/* dst [rows, cols] (row stride ldd) = src (row stride lds), bf16 */
void qlt_cuda_copy_rows(cudaStream_t s, bf16 *dst, int64_t ldd, const bf16 *src, int64_t lds, int64_t rows,
                        int64_t cols);
void qlt_cuda_dropout(qlt_backend *be, void *out, const void *x, int64_t count, float p, const uint64_t *seed,
                      uint64_t salt);

/* convert.cu: conversions used by other files (stream-ordered), the benchmarks' random fill */
void qlt_cuda_f32_to_bf16(cudaStream_t s, bf16 *out, const float *x, int64_t count);
void qlt_cuda_f16_to_bf16(cudaStream_t s, bf16 *out, const __half *x, int64_t count);
void qlt_cuda_bias_add(cudaStream_t s, bf16 *y, const float *bias, int64_t n, int64_t rows);
void qlt_cuda_fill_random_bf16(cudaStream_t s, bf16 *out, int64_t count, uint64_t seed);

/* rmsnorm.cu: RMSNorm, the residual add fused with it, Qwen3's head norm fused with RoPE */
void qlt_cuda_rmsnorm_fwd(qlt_backend *be, void *y, float *rstd, const void *x, const float *w, int64_t n,
                          int64_t d, float eps);
void qlt_cuda_rmsnorm_bwd(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd,
                          const float *w, int64_t n, int64_t d, float beta);
void qlt_cuda_add_rmsnorm_fwd(qlt_backend *be, void *sum, void *y, float *rstd, const void *a, const void *b,
                              const float *w, int64_t n, int64_t d, float eps);
void qlt_cuda_head_norm_rope_fwd(qlt_backend *be, void *y, float *rstd, const void *x, const float *w,
                                 const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                                 float eps);
void qlt_cuda_head_norm_rope_bwd(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd,
                                 const float *w, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                                 int head_dim);

/* attention.cu: cuDNN's fused attention where it applies, the own kernels otherwise */
void qlt_cuda_attention_fwd(qlt_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                            const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads, int head_dim,
                            float scale);
void qlt_cuda_attention_bwd(qlt_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                            const void *out, const float *lse, const void *q, const void *k, const void *v,
                            const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads, int head_dim,
                            float scale);
size_t qlt_cuda_attention_bwd_scratch_bytes(qlt_backend *be, int64_t n, int n_heads, int n_kv_heads, int head_dim);
int qlt_cuda_attention_plan(qlt_backend *be, int batch, int seq, int n_heads, int n_kv_heads, int head_dim,
                            float scale);
/* attention_decode.cu: attention over a KV cache (generation), and the new rows' store into it */
void qlt_cuda_kv_store(qlt_backend *be, void *k_cache, void *v_cache, const void *k_new, const void *v_new,
                       const int32_t *pos, int64_t n, int64_t width);
void qlt_cuda_attention_decode(qlt_backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                               const int32_t *pos, int64_t max_keys, int64_t n, int n_heads, int n_kv_heads,
                               int head_dim, float scale, int window);

/* cross_entropy.cu */
size_t qlt_cuda_loss_scratch_bytes(qlt_backend *be, int64_t n, int64_t v);
void qlt_cuda_lm_head_loss(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch, const void *x,
                           const qlt_weight *w, const int32_t *targets, int64_t n);

/* adamw.cu */
void qlt_cuda_grad_norm_sq(qlt_backend *be, qlt_optim_scalars *scalars, const float *g, int64_t count);
void qlt_cuda_adamw(qlt_backend *be, float *p, const float *g, float *m, float *v, int64_t count,
                    const qlt_optim_scalars *scalars);

#endif
