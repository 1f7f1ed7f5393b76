/* backend_cpu_internal.h: what the CPU backend's files share: its private state (the mode, memory
 * accounting, the profile, the dequantization scratch and cache) and the table entries that live outside
 * backend_cpu.c (weights.c: the frozen weights' lifecycle; linear.c: the products with them). */
#ifndef QLT_BACKEND_CPU_INTERNAL_H
#define QLT_BACKEND_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "cpu/cpu_fast.h"

/* A frozen NF4 weight kept dequantized (be->dequant_cache_bytes) */
typedef struct qlt_cpu_cached_weight {
    const qlt_weight *w;
    float *data; /* [rows, cols] */
} qlt_cpu_cached_weight;

/* A shape of the frozen-weight products run while profiling: C [m, n] = A [m, k] . op(B) (gemm_rate.c). */
typedef struct qlt_cpu_gemm_shape {
    int trans_b;
    int64_t m, n, k;
    int64_t calls;
} qlt_cpu_gemm_shape;
#define QLT_CPU_GEMM_SHAPES 64

typedef struct qlt_cpu_impl {
    int reference;            /* 1: the reference ops of cpu_ops.h (double sums); 0: cpu_fast.h's */
    qlt_cpu_gemm_fn gemm;     /* qlt_cpu_gemm (reference) or qlt_cpu_sgemm */
    float *dequant;           /* scratch for one dequantized NF4 weight */
    int64_t dequant_cap;      /* elements */
    qlt_cpu_cached_weight *cache; /* [n_cache] weights kept dequantized, within be->dequant_cache_bytes */
    int n_cache, cap_cache;
    int64_t cache_bytes;      /* what they hold */
    float *lora_work;         /* [lora_work_floats] the default mode's LoRA workspace (lora_group_prepare) */
    int64_t lora_work_floats;
    int profiling;
    qlt_phase current;
    double mark;              /* time of the last phase mark */
    double ms[QLT_PHASE_COUNT];
    size_t live_bytes, peak_bytes;
    struct {                  /* memory planning (backend.h plan_begin): counted, not allocated */
        int on;
        size_t live, peak;
        int64_t dequant_cap, lora_work_floats; /* what the planned load would grow the scratches to */
    } plan;
    qlt_cpu_gemm_shape shapes[QLT_CPU_GEMM_SHAPES]; /* [n_shapes] the linear ops' products since profile_on */
    int n_shapes, shapes_dropped;
    int fault;                /* QLT_FAULT_*: only the fault-injection hook records one on the CPU */
} qlt_cpu_impl;

/* Counts bytes the backend now holds (negative: released) for the peak-memory figure. */
void qlt_cpu_track(qlt_cpu_impl *impl, int64_t bytes);
/* The profile's phase mark (be->phase). */
void qlt_cpu_phase(qlt_backend *be, qlt_phase p);

/* weights.c */
int qlt_cpu_weight_create(qlt_backend *be, qlt_weight *w, const void *host, qlt_dtype dtype, int64_t rows,
                          int64_t cols, int nf4_blocksize, int double_quant);
int qlt_cpu_weight_from_nf4(qlt_backend *be, qlt_weight *w, qlt_nf4 *host, int64_t rows, int64_t cols);
void qlt_cpu_weight_free(qlt_backend *be, qlt_weight *w);
int qlt_cpu_weight_stack_prepare(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols);
int64_t qlt_cpu_dequant_cache_held(qlt_backend *be);
/* The weight as float32 [rows, cols]: its own array, its cached copy, or dequantized into the scratch (valid
 * until the next call). */
const float *qlt_cpu_weight_f32(qlt_backend *be, const qlt_weight *w);
/* Frees the scratch and the cache (backend destroy). */
void qlt_cpu_weights_release(qlt_backend *be);

/* gemm_rate.c: counts a frozen-weight product (while profiling); the sgemm peak (be->gemm_peak_tflops) */
void qlt_cpu_record_gemm(qlt_cpu_impl *impl, int trans_b, int64_t m, int64_t n, int64_t k);
double qlt_cpu_gemm_peak_tflops(qlt_backend *be);

/* linear.c */
void qlt_cpu_linear_fwd(qlt_backend *be, void *y, const void *x, const qlt_weight *const *w, int k, const float *bias,
                        int64_t n);
void qlt_cpu_linear_bwd_x(qlt_backend *be, void *dx, const void *dy, const qlt_weight *const *w, int k, int64_t n,
                          float beta);
void qlt_cpu_lora_fwd_op(qlt_backend *be, const qlt_lora_site *sites, int k, float *u, const void *x, int64_t n,
                         int64_t in, int r, float scale);
void qlt_cpu_lora_bwd_op(qlt_backend *be, const qlt_lora_site *sites, int k, float *scratch, const float *u,
                         const void *x, void *dx, float dx_beta, int64_t n, int64_t in, int r, float scale);
int qlt_cpu_lora_group_prepare(qlt_backend *be, int k, int64_t in, const int64_t *outs, int r);
void qlt_cpu_linear_lora_bwd(qlt_backend *be, void *dx, float dx_beta, const qlt_weight *const *w, int k, int stacked,
                             const qlt_lora_site *sites, float *scratch, const float *u, const void *x, int64_t n,
                             int r, float scale);
void qlt_cpu_lm_head_loss_op(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch, const void *x,
                             const qlt_weight *w, const int32_t *targets, int64_t n);
size_t qlt_cpu_loss_scratch_bytes(qlt_backend *be, int64_t n, int64_t v);
void qlt_cpu_logits(qlt_backend *be, float *out, const void *x, const qlt_weight *w, int64_t n);

#endif
