/* backend.h: the one dispatch table every op goes through, so the same model, autograd tape and trainer
 * run on the CPU reference (src/cpu, float32, plain C) and on CUDA (src/cuda, bf16 activations).
 *
 * Conventions for every op:
 * - Pointers are backend memory. `act` buffers hold be->act_dtype elements (F32 on cpu, BF16 on cuda);
 *   `float *` buffers are float32 on every backend (LoRA weights, their gradients, Adam moments, norm
 *   weights, softmax statistics, scalars).
 * - Token-major layouts: a batch of B rows of S tokens is N = B*S tokens; hidden states are [N, D].
 *   Attention heads are laid out inside a row: q [N, n_heads*head_dim], k/v [N, n_kv_heads*head_dim].
 * - Outputs named `out`/`y` are overwritten unless the op says "+=" (accumulate) or takes a beta
 *   (out = beta*out + result, beta 0 or 1). Parameters' gradients always accumulate (+=).
 * - Ops never allocate and never synchronize with the host (so a CUDA step can be graph-captured);
 *   only alloc/free/upload/download/sync do.
 * - Packed examples: seg_start[t] is the index, inside t's row, of the first token of t's example
 *   (examples are contiguous, so seg_start never decreases along a row; kernels may rely on it).
 *   Token t may attend to key j of the same row iff seg_start[t] <= j <= t. A sliding-window layer
 *   hands attention the batch's seg_window instead (max(seg_start[t], t - window + 1), also never
 *   decreasing), so the same contract masks by example, causality and window at once. */
#ifndef QLT_BACKEND_H
#define QLT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/weight.h"
#include "common/dtype.h"

/* Scalars the optimizer step reads from backend memory. The host writes the first part (up to
 * QLT_OPTIM_HOST_BYTES) before each step, so a captured graph replays with new values; the rest is the
 * device's: grad_norm_sq writes it after the step's gradients are summed, and it carries the optimizer's own
 * counters from step to step (the host sets them only at the start of a run and on resume). */
typedef struct qlt_optim_scalars {
    /* written by the host */
    float lr;
    float beta1, beta2, eps, weight_decay;
    float max_grad_norm;    /* 0 = no clipping */
    float loss_sum;         /* sum of token losses of the step, accumulated by lm_head_loss (host zeroes it) */
    float grad_scale;       /* 1 / (counted tokens of the optimizer step): the loss gradient's scale */
    /* written by grad_norm_sq (qlt_optim_guard, backend/optim_guard.h) */
    float grad_norm_sq;     /* sum of squares of every gradient */
    float bias_correction1; /* 1 - beta1^adam_step */
    float bias_correction2; /* 1 - beta2^adam_step */
    int32_t skip;           /* 1: the step's loss or gradient norm is not finite: adamw changes nothing */
    int32_t bad_streak;     /* skipped steps in a row, up to and including this one */
    int64_t adam_step;      /* updates applied (Adam's step count: skipped steps do not count) */
    int64_t skipped_steps;  /* steps skipped since the run began */
} qlt_optim_scalars;

/* Bytes of qlt_optim_scalars the host writes before a step (the device's counters after them stay). */
#define QLT_OPTIM_HOST_BYTES offsetof(qlt_optim_scalars, grad_norm_sq)

typedef enum qlt_backward_a {
    QLT_BACKWARD_A_BF16 = 0,
    QLT_BACKWARD_A_FP16,
    QLT_BACKWARD_A_FP32,
} qlt_backward_a;

/* Phases of a step for the time breakdown of `qlora-train bench`. */
typedef enum qlt_phase {
    QLT_PHASE_FWD_GEMM = 0, /* frozen-weight GEMMs of the forward */
    QLT_PHASE_BWD_GEMM,     /* dX = dY . W of the backward */
    QLT_PHASE_LORA,         /* LoRA side products, forward and backward */
    QLT_PHASE_ATTENTION,
    QLT_PHASE_LOSS,         /* fused lm_head + cross-entropy */
    QLT_PHASE_ELEMENTWISE,  /* norms, rope, swiglu, adds, embedding, dropout */
    QLT_PHASE_DEQUANT,      /* NF4 -> bf16 (inside the linear ops) */
    QLT_PHASE_OPTIMIZER,    /* gradient norm + AdamW */
    QLT_PHASE_OTHER,        /* uploads, zeroing, anything unmarked */
    QLT_PHASE_COUNT
} qlt_phase;

const char *qlt_phase_name(qlt_phase p);

/* The most weights a stacked linear takes (q/k/v). */
#define QLT_STACK_MAX 3

/* Rows of a stack of k weights read as one matrix: the sum of theirs. */
static inline int64_t qlt_stack_rows(const qlt_weight *const *w, int k) {
    int64_t rows = 0;
    for (int i = 0; i < k; i++) rows += w[i]->rows;
    return rows;
}

/* One projection of a LoRA group: where its output lives and its adapter. */
typedef struct qlt_lora_site {
    void *y;        /* act [N, ld]: forward output, y += scale u B^T on columns 0..out-1 */
    const void *dy; /* act [N, ld]: the output's gradient (backward) */
    int64_t ld;     /* row stride of y / dy, elements */
    int64_t out;    /* output features */
    const float *a; /* [r, in] */
    const float *b; /* [out, r] */
    float *da, *db; /* gradients, += */
} qlt_lora_site;

#define QLT_BACKEND_EVENTS 4

/* What attention_plan answers. */
enum { QLT_ATTENTION_OWN = 0, QLT_ATTENTION_FUSED_DENSE = 1, QLT_ATTENTION_FUSED_RAGGED = 2 };
/* Rows of at most this many packed examples (max_row_examples) run through a library's fused attention (cuDNN):
 * each row gets that many ragged sequences, most short or empty, so rows of many short examples stay on the own
 * kernels, which skip masked tiles as cheaply. */
#define QLT_FUSED_ATTENTION_MAX_ROW_EXAMPLES 16

typedef struct qlt_backend qlt_backend;

/* What fault_state answers. */
enum { QLT_FAULT_NONE = 0, QLT_FAULT_RECOVERABLE = 1, QLT_FAULT_STICKY = 2 };

/* What the device's clock and power did while monitored (backend clock_monitor). */
typedef struct qlt_clock_report {
    int samples;                              /* 0: nothing known */
    double sm_mhz_median, sm_mhz_min, sm_mhz_max; /* max: the device's maximum SM clock */
    double power_w_mean, power_limit_w;
    double capped_share;                      /* share of samples throttled by the power cap */
    double energy_j, energy_wall_s;           /* the device's energy counter between on and off (0: unknown) */
} qlt_clock_report;

struct qlt_backend {
    const char *name;     /* "cpu" or "cuda" */
    qlt_dtype act_dtype;  /* element type of activations */
    qlt_backward_a backward_a;
    int deterministic;    /* 1: bitwise-reproducible ops run to run (CUDA: the attention backward without
                           * atomics, slower); 0: the fastest kernels, last bits may vary (train.deterministic) */
    int attention_own;    /* 1: never cuDNN's attention (train.attention: own) */
    int max_row_examples; /* most packed examples that matter in one row of any batch this run will see
                           * (qlt_dataset_max_row_examples); 0: unknown. The caller sets it before the first step;
                           * the CUDA backend runs attention through cuDNN for 1 (dense) up to
                           * QLT_FUSED_ATTENTION_MAX_ROW_EXAMPLES (ragged), the own kernels otherwise */
    int64_t dequant_cache_bytes; /* train.dequant_cache_gib: at most this many bytes of backend memory keep frozen
                           * weights dequantized (CPU: NF4 as float32; CUDA: NF4 as bf16, and stacks side by side)
                           * from their first use on, instead of dequantizing them before every use; 0: off. The
                           * values are the same either way. The caller sets it before the first step; the CUDA
                           * backend fills it only outside graph capture, so a captured step follows an eager one */
    int cudnn_version;    /* CUDA: the cuDNN (91900 = 9.19.0) whose fused attention runs where max_row_examples
                           * allows; 0: none (not built in or not loadable) */
    char device_name[128]; /* the device as its driver names it ("NVIDIA H100 80GB HBM3"); "" when none */
    void *impl;           /* backend-private state */
    /* Device errors. fault_unwind 0 (the default): a failing device call prints itself and aborts the process;
     * 1 (the trainer sets it): the failure is recorded, later calls go on (grad_norm_sq and adamw then change
     * nothing, so the optimizer state stays that of the last finished step) and the caller asks fault_state. */
    int fault_unwind;

    /* ---- memory (may allocate / synchronize; never called inside a step) ---- */
    void *(*alloc)(qlt_backend *be, size_t bytes); /* NULL on failure */
    void (*free)(qlt_backend *be, void *p);
    void (*upload)(qlt_backend *be, void *dst, const void *src_host, size_t bytes);
    void (*download)(qlt_backend *be, void *dst_host, const void *src, size_t bytes); /* synchronous */
    void (*sync)(qlt_backend *be);
    void (*destroy)(qlt_backend *be);
    /* Profiling (for `bench`): while on, the time between consecutive phase marks is charged to the
     * earlier phase. profile_read synchronizes and returns the milliseconds per phase since profile_on. */
    void (*profile_on)(qlt_backend *be, int on);
    void (*phase)(qlt_backend *be, qlt_phase p); /* cheap no-op when profiling is off */
    void (*profile_read)(qlt_backend *be, double ms[QLT_PHASE_COUNT]);
    /* Bytes of backend memory still free (for train.grad_checkpoint: auto). */
    size_t (*available_bytes)(qlt_backend *be);
    /* Optional (NULL: unknown): bytes of the device's memory in use by anything (the CUDA context, the libraries,
     * other processes), as nvidia-smi counts it: total minus free. */
    size_t (*device_used_bytes)(qlt_backend *be);
    /* Peak bytes of backend memory allocated so far (0 if unknown). */
    size_t (*peak_bytes)(qlt_backend *be);
    /* Bytes of backend memory allocated now, counted as peak_bytes counts (0 if unknown; may be NULL). */
    size_t (*live_bytes)(qlt_backend *be);
    /* Optional (NULL: this backend does not plan): memory planning (src/train/memory_plan.c). Between plan_begin
     * and plan_end, alloc hands out addresses that must never be used, weight_create fills *w (shape, format)
     * without reading host, upload / download (zeros) / zero / sync do nothing, and the load-time prepares
     * (weight_stack_prepare, bias_prepare, lora_group_prepare) only note the workspaces they would grow to; free
     * and weight_free take back what was handed out. plan_end returns the bytes all that took at its peak plus the
     * workspaces' growth: what the same calls would add to peak_bytes outside planning. */
    void (*plan_begin)(qlt_backend *be);
    size_t (*plan_end)(qlt_backend *be);
    /* Bytes that keep frozen weights dequantized now (dequant_cache_bytes; 0 when off). */
    int64_t (*dequant_cache_held)(qlt_backend *be);
    /* Measured dense bf16 GEMM rate in TFLOP/s (the MFU denominator), or NULL when not applicable. */
    double (*gemm_peak_tflops)(qlt_backend *be);
    /* Sampling of the device's SM clock, power draw and power-cap throttling (for `bench`): on = 1 starts,
     * on = 0 stops and fills *out (samples 0 when the device could not tell). NULL when not applicable. */
    void (*clock_monitor)(qlt_backend *be, int on, qlt_clock_report *out);

    /* The first device error recorded since create (fault_unwind 1): QLT_FAULT_NONE, QLT_FAULT_RECOVERABLE (the
     * device's memory is still readable, e.g. an allocation failed) or QLT_FAULT_STICKY (the context is unusable,
     * e.g. an illegal address: nothing can be read back); msg (cap bytes) gets its text. Never synchronizes. */
    int (*fault_state)(qlt_backend *be, char *msg, size_t cap);
    /* Test hook (QLT_TEST_DEVICE_FAULT): records a fault, sticky or not, as a failing device call would. */
    void (*fault_inject)(qlt_backend *be, int sticky);

    /* ---- asynchronous transfers and graphs (NULL on backends without them, e.g. the CPU) ----
     * A captured graph replays every op issued between capture_begin and capture_end; what changes from
     * step to step must be in backend memory the host rewrites (with upload_async) before each launch. */
    void *(*host_alloc)(qlt_backend *be, size_t bytes); /* pinned host memory, for the async copies */
    void (*host_free)(qlt_backend *be, void *p);
    void (*upload_async)(qlt_backend *be, void *dst, const void *src_pinned, size_t bytes);
    void (*download_async)(qlt_backend *be, void *dst_pinned, const void *src, size_t bytes);
    void (*event_record)(qlt_backend *be, int slot); /* slot < QLT_BACKEND_EVENTS: marks this point of the stream */
    void (*event_wait)(qlt_backend *be, int slot);   /* the host waits until the stream passed that mark */
    int (*capture_begin)(qlt_backend *be);
    int (*capture_end)(qlt_backend *be, void **graph); /* instantiates the captured graph */
    int (*graph_launch)(qlt_backend *be, void *graph);
    void (*graph_free)(qlt_backend *be, void *graph);
    /* Uploads a frozen weight given as host values of `dtype` [rows, cols], quantizing to NF4 when
     * `nf4_blocksize` > 0. Fills *w; returns 0 or -1 with qlt_fail. */
    int (*weight_create)(qlt_backend *be, qlt_weight *w, const void *host, qlt_dtype dtype, int64_t rows,
                         int64_t cols, int nf4_blocksize, int double_quant);
    /* Takes over an NF4 weight already quantized on the host (a bitsandbytes checkpoint): *host is
     * consumed (moved or uploaded and freed). */
    int (*weight_from_nf4)(qlt_backend *be, qlt_weight *w, qlt_nf4 *host, int64_t rows, int64_t cols);
    void (*weight_free)(qlt_backend *be, qlt_weight *w);

    /* ---- ops (asynchronous, allocation-free) ---- */
    void (*zero)(qlt_backend *be, void *p, size_t bytes);
    /* act x [N, D] = act(emb[ids[t], :]); ids int32 [N]; emb [V, D] any dense format. */
    void (*embed)(qlt_backend *be, void *x, const int32_t *ids, const qlt_weight *emb, int64_t n);
    /* y [N, D] = x * rstd * w; rstd float [N] saved for backward. */
    void (*rmsnorm_fwd)(qlt_backend *be, void *y, float *rstd, const void *x, const float *w, int64_t n,
                        int64_t d, float eps);
    /* dx [N, D] = beta*dx + d(rmsnorm)/dx . dy. */
    void (*rmsnorm_bwd)(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd,
                        const float *w, int64_t n, int64_t d, float beta);
    /* Prepares a stack of k frozen weights with the same cols (gate and up) for the linear ops below:
     * grows the scratch they are dequantized into side by side, with extra_cols more columns a row (room
     * for adapters folded in by linear_lora_fwd). Load time only; 0 or -1 with qlt_fail. */
    int (*weight_stack_prepare)(qlt_backend *be, const qlt_weight *const *w, int k, int64_t extra_cols);
    /* Optional (NULL: nothing to do): a bias (float [n], backend memory) that linear_fwd will be given;
     * the backend may keep what it needs to fuse it into the GEMM. Load time only; 0 or -1 with qlt_fail. */
    int (*bias_prepare)(qlt_backend *be, const float *bias, int64_t n);
    /* A stack of k <= QLT_STACK_MAX weights with the same cols read as one [sum rows_i, cols] matrix:
     * y [N, sum rows_i] = x [N, cols] . [W_0; ...; W_k-1]^T (+ bias [rows_0] when not NULL; k == 1 only).
     * One GEMM on CUDA (NF4 weights dequantized side by side). */
    void (*linear_fwd)(qlt_backend *be, void *y, const void *x, const qlt_weight *const *w, int k,
                       const float *bias, int64_t n);
    /* dx [N, cols] = beta*dx + dy [N, sum rows_i] . [W_0; ...]  (one GEMM over the stack; precision per
     * be->backward_a). */
    void (*linear_bwd_x)(qlt_backend *be, void *dx, const void *dy, const qlt_weight *const *w, int k,
                         int64_t n, float beta);
    /* Optional (NULL: linear_fwd then lora_fwd, which it must equal up to rounding): a linear group in which
     * every weight has an adapter (sites[i] belongs to w[i]; no dropout), in one op:
     * y_i [N, rows_i] = x [N, cols] . W_i^T (+ bias[i]) + scale u_i . B_i^T, u [N, k*r] = x . A^T saved as
     * lora_fwd saves it. Stacked (y not NULL): the outputs are the one matrix y [N, sum rows_i] the sites point
     * into, bias NULL; otherwise (y NULL) each site's y is its own output and bias is NULL or one per weight
     * (each may be NULL). The backend picks the form (CUDA: outputs much wider than x fold the adapters into
     * the frozen GEMM, [x | u3] . [W | scale B3]^T over K = cols + 3kr, in the room weight_stack_prepare made
     * with extra_cols >= 3kr; otherwise the adapters' products are written first and the frozen GEMMs add
     * onto them: each output is written once, never read and written again). */
    void (*linear_lora_fwd)(qlt_backend *be, void *y, float *u, const void *x, const qlt_weight *const *w, int k,
                            const float *const *bias, const qlt_lora_site *sites, int64_t n, int r, float scale);
    /* Optional (NULL: nothing to do): a LoRA group lora_fwd / lora_bwd will be given (k sites of input
     * width in, output widths outs[k], rank r); the backend grows the workspaces it needs. Load time
     * only; 0 or -1 with qlt_fail. */
    int (*lora_group_prepare)(qlt_backend *be, int k, int64_t in, const int64_t *outs, int r);
    /* LoRA side path of k projections that read the same input x [N, in] (q/k/v, gate/up, or one):
     * u [N, k*r] = x . [A_0; ...; A_k-1]^T (saved; site i's columns i*r..), then per site
     * y_i [N, out_i] (row stride ld_i) += scale * u_i . B_i^T. x.A^T is one product for all sites. */
    void (*lora_fwd)(qlt_backend *be, const qlt_lora_site *sites, int k, float *u, const void *x, int64_t n,
                     int64_t in, int r, float scale);
    /* Per site: du_i = scale * dy_i . B_i, dB_i += scale * dy_i^T . u_i, dA_i += du_i^T . x; and
     * dx [N, in] = dx_beta*dx + sum_i du_i . A_i (when dx != NULL). dA and dx are one product each over
     * all sites. scratch float [N, k*r] (the du_i side by side). */
    void (*lora_bwd)(qlt_backend *be, const qlt_lora_site *sites, int k, float *scratch, const float *u,
                     const void *x, void *dx, float dx_beta, int64_t n, int64_t in, int r, float scale);
    /* Optional (NULL: linear_bwd_x, then lora_bwd): the backward of a linear group in which every weight has an
     * adapter (sites[i] belongs to w[i], sites[i].dy is its output's gradient; no dropout), all at once:
     * lora_bwd's du, dB and dA, and dx [N, cols] = dx_beta*dx + sum_i (dy_i . W_i + du_i . A_i). Stacked: the
     * sites' dy are the columns of one [N, sum rows_i] gradient (site 0's dy its start, row stride sum rows_i).
     * The backend may fold adapters and narrow outputs into one GEMM (CUDA: [dy_j... | du3] . [W_j...; A3]
     * over K = sum out_j + 3kr for the non-stacked weights with out_j <= cols / 4, e.g. k/v or the down
     * projection, so dx is read and written once for them), the wide ones' GEMMs adding onto dx after it.
     * scratch float [N, k*r]; dx is not NULL and aliases no dy; the op marks its own profiling phases
     * (BWD_GEMM, LORA). */
    void (*linear_lora_bwd)(qlt_backend *be, void *dx, float dx_beta, const qlt_weight *const *w, int k, int stacked,
                            const qlt_lora_site *sites, float *scratch, const float *u, const void *x, int64_t n,
                            int r, float scale);
    /* Rotary embedding in place on x [N, n_heads, head_dim] (HF rotate-half layout), angle
     * pos[t] * inv_freq[i] for i < head_dim/2; inverse = 1 rotates by the negative angle (backward). */
    void (*rope)(qlt_backend *be, void *x, const int32_t *pos, const float *inv_freq, int64_t n,
                 int n_heads, int head_dim, int inverse);
    /* Optional (NULL: models that need it are refused at load, qlt_model_check_backend): rope on the first
     * rotary_dim dims of each head only (even, <= head_dim; the others pass through), its cos and sin times
     * attn_factor (LongRoPE's): x_rot = attn_factor * R(angle) x_rot, inv_freq [rotary_dim / 2]. transpose = 1
     * applies attn_factor * R^T (the backward). */
    void (*rope_scaled)(qlt_backend *be, void *x, const int32_t *pos, const float *inv_freq, int64_t n, int n_heads,
                        int head_dim, int rotary_dim, float attn_factor, int transpose);
    /* Causal grouped-query attention with packed-example masking; out [N, n_heads*hd],
     * lse float [N * n_heads] = log-sum-exp of the scaled scores (saved for backward), laid out [N, n_heads]
     * except where the CUDA backend runs the pair through cuDNN ([batch, n_heads, seq]; see
     * max_row_examples): only attention_bwd reads it. */
    void (*attention_fwd)(qlt_backend *be, void *out, float *lse, const void *q, const void *k,
                          const void *v, const int32_t *seg_start, int batch, int seq, int n_heads,
                          int n_kv_heads, int head_dim, float scale);
    /* dq, dk, dv overwritten. scratch: attention_bwd_scratch_bytes(...) bytes, starting with float
     * [N, n_heads] = rowsum(dout * out) (the own kernels; cuDNN's attention uses it as its workspace). */
    void (*attention_bwd)(qlt_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                          const void *out, const float *lse, const void *q, const void *k, const void *v,
                          const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                          int head_dim, float scale);
    size_t (*attention_bwd_scratch_bytes)(qlt_backend *be, int64_t n, int n_heads, int n_kv_heads, int head_dim);
    /* Inference with a KV cache: n new queries q [n, n_heads*head_dim] at the consecutive positions pos [n]
     * (backend memory: pos[i] = pos[0] + i) against the keys and values of positions 0 .. pos[n-1],
     * k_cache / v_cache [>= pos[n-1]+1, n_kv_heads*head_dim] (the new tokens' rows already stored); query i
     * attends keys 0 .. pos[i], or with window > 0 (a sliding-window layer) only the keys j with
     * pos[i] - j < window. max_keys >= pos[n-1] + 1 bounds the keys and sizes the launch, so a captured
     * step replays with new positions. out [n, n_heads*head_dim]. The CUDA backend takes window 0 only. */
    void (*attention_decode)(qlt_backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                             const int32_t *pos, int64_t max_keys, int64_t n, int n_heads, int n_kv_heads,
                             int head_dim, float scale, int window);
    /* The new tokens' keys and values into the cache: k_cache[pos[i]] = k_new[i], v_cache[pos[i]] = v_new[i]
     * (rows of width elements, activation dtype; pos [n] backend memory). */
    void (*kv_store)(qlt_backend *be, void *k_cache, void *v_cache, const void *k_new, const void *v_new,
                     const int32_t *pos, int64_t n, int64_t width);
    /* Optional (NULL: always the backend's own attention): how attention_fwd / attention_bwd will run this
     * shape with max_row_examples and deterministic as they are set now, building what it needs (cuDNN's plans)
     * so no step builds it: QLT_ATTENTION_OWN, QLT_ATTENTION_FUSED_DENSE (lse [batch, n_heads, seq]) or
     * QLT_ATTENTION_FUSED_RAGGED (each packed example its own sequence; lse [batch*seq, n_heads]). Load time. */
    int (*attention_plan)(qlt_backend *be, int batch, int seq, int n_heads, int n_kv_heads, int head_dim,
                          float scale);
    /* gu [N, 2I] holds gate (columns 0..I-1) and up (I..2I-1) side by side, as the stacked gate+up
     * linear writes them: h [N, I] = silu(gate) * up. */
    void (*swiglu_fwd)(qlt_backend *be, void *h, const void *gu, int64_t n, int64_t inter);
    /* dgu [N, 2I] = (dgate | dup), overwritten; dgu may be gu itself (the gradient replaces the input). */
    void (*swiglu_bwd)(qlt_backend *be, void *dgu, const void *dh, const void *gu, int64_t n, int64_t inter);
    /* Gemma's ops (Gemma 2 / 3; model/gemma.c refuses a Gemma model on a backend where one is NULL):
     * geglu_fwd: h [N, I] = gelu_tanh(gate) * up from gu [N, 2I] laid out as for swiglu_fwd, gelu_tanh(x) =
     * x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (torch's approximate="tanh"); geglu_bwd as swiglu_bwd. */
    void (*geglu_fwd)(qlt_backend *be, void *h, const void *gu, int64_t n, int64_t inter);
    void (*geglu_bwd)(qlt_backend *be, void *dgu, const void *dh, const void *gu, int64_t n, int64_t inter);
    /* x [count] act *= s, in place (Gemma's embeddings times sqrt(hidden)). */
    void (*scale_inplace)(qlt_backend *be, void *x, int64_t count, float s);
    /* attention_fwd / attention_bwd with soft-capped scores: s = softcap * tanh(scale q.k / softcap) before the
     * mask and softmax (Gemma 2's attn_logit_softcapping); lse is of the capped scores. */
    void (*attention_softcap_fwd)(qlt_backend *be, void *out, float *lse, const void *q, const void *k,
                                  const void *v, const int32_t *seg_start, int batch, int seq, int n_heads,
                                  int n_kv_heads, int head_dim, float scale, float softcap);
    void (*attention_softcap_bwd)(qlt_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                                  const void *out, const float *lse, const void *q, const void *k, const void *v,
                                  const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                  int head_dim, float scale, float softcap);
    /* lm_head_loss with soft-capped logits: softcap * tanh(x . W^T / softcap) (final_logit_softcapping);
     * dx through the cap. Same scratch as lm_head_loss. */
    void (*lm_head_loss_softcap)(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch,
                                 const void *x, const qlt_weight *w, const int32_t *targets, int64_t n, float softcap);
    /* attention_decode with soft-capped scores (Gemma 2's generation). */
    void (*attention_decode_softcap)(qlt_backend *be, void *out, const void *q, const void *k_cache,
                                     const void *v_cache, const int32_t *pos, int64_t max_keys, int64_t n, int n_heads,
                                     int n_kv_heads, int head_dim, float scale, int window, float softcap);
    /* x float [count] = softcap * tanh(x / softcap), in place (logits for evaluation and generation). */
    void (*softcap_f32)(qlt_backend *be, float *x, int64_t count, float softcap);
    /* The residual add fused with the RMSNorm that follows it: sum [N, D] = a + b (rounded to act as
     * `add` rounds it), y = rmsnorm(sum) with rstd [N] saved. One pass over a, b. */
    void (*add_rmsnorm_fwd)(qlt_backend *be, void *sum, void *y, float *rstd, const void *a, const void *b,
                            const float *w, int64_t n, int64_t d, float eps);
    /* Qwen3's per-head q/k norm fused with the RoPE after it: y [N, heads, head_dim] =
     * rope(rmsnorm(x) * w) per head, rstd float [N * heads] saved. One pass instead of two. */
    void (*head_norm_rope_fwd)(qlt_backend *be, void *y, float *rstd, const void *x, const float *w,
                               const int32_t *pos, const float *inv_freq, int64_t n, int heads, int head_dim,
                               float eps);
    /* Its backward: dx = rmsnorm_bwd(rope^-1(dy)) per head (dx overwritten; dx may be dy: in place). */
    void (*head_norm_rope_bwd)(qlt_backend *be, void *dx, const void *dy, const void *x, const float *rstd,
                               const float *w, const int32_t *pos, const float *inv_freq, int64_t n, int heads,
                               int head_dim);
    /* out = x (count act elements) */
    void (*copy)(qlt_backend *be, void *out, const void *x, int64_t count);
    /* out = a + b (out may alias a or b) */
    void (*add)(qlt_backend *be, void *out, const void *a, const void *b, int64_t count);
    /* Inverted dropout: out = x * keep / (1 - p), keep = qlt_dropout_keep(qlt_dropout_seed(*seed, salt), i, p)
     * (common/counter_hash.h, shared by both backends): a counter hash, so the backward regenerates the
     * same mask. *seed is backend memory (the host updates it before each step; a captured graph replays
     * with new seeds). out may alias x. */
    void (*dropout)(qlt_backend *be, void *out, const void *x, int64_t count, float p, const uint64_t *seed,
                    uint64_t salt);
    /* Fused lm_head + cross-entropy over N tokens: logits = x . W^T (W [V, D]); for targets[t] != -100,
     * scalars->loss_sum += -log softmax(logits)[target]; when dx != NULL, dx [N, D] = scalars->grad_scale *
     * d(sum of losses)/dx (0 rows for ignored tokens). Never holds [N, V] in float32 at once on CUDA;
     * scratch: loss_scratch_bytes(be, N, V) bytes (the chunk logits and per-token losses). */
    void (*lm_head_loss)(qlt_backend *be, qlt_optim_scalars *scalars, void *dx, void *scratch,
                         const void *x, const qlt_weight *w, const int32_t *targets, int64_t n);
    /* Bytes of lm_head_loss scratch for n tokens and vocabulary v (the backend's chunk of logits). */
    size_t (*loss_scratch_bytes)(qlt_backend *be, int64_t n, int64_t v);
    /* out float [N, V] = float(x . W^T): logits for evaluation and tests. */
    void (*logits)(qlt_backend *be, float *out, const void *x, const qlt_weight *w, int64_t n);
    /* scalars->grad_norm_sq = sum(g^2) over g float [count]; then qlt_optim_guard (backend/optim_guard.h): a
     * non-finite loss_sum or norm sets skip and counts it, else Adam's step count advances and the bias
     * corrections are formed for it. */
    void (*grad_norm_sq)(qlt_backend *be, qlt_optim_scalars *scalars, const float *g, int64_t count);
    /* One AdamW step (torch semantics) over count parameters, with the global-norm clip scale
     * min(1, max_grad_norm / (sqrt(grad_norm_sq) + 1e-6)) applied to g first when max_grad_norm > 0; when
     * scalars->skip is set it changes nothing (p, m and v keep their bits). */
    void (*adamw)(qlt_backend *be, float *p, const float *g, float *m, float *v, int64_t count,
                  const qlt_optim_scalars *scalars);
};

#endif
