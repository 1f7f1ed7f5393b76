/* backend_cpu_gemma.c: the CPU backend's table entries for Gemma 2 / 3 (GeGLU, soft-capped attention and logits,
 * the embeddings' scale), each picking the reference or the default mode's op as backend_cpu.c does; kept apart
 * so the Gemma ops are one file's concern. */
#include <math.h>

#include "cpu/backend_cpu_internal.h"
#include "cpu/gemma_ops.h"

static int reference_mode(qlt_backend *be) { return ((qlt_cpu_impl *)be->impl)->reference; }

static void cpu_geglu_fwd(qlt_backend *be, void *h, const void *gu, int64_t n, int64_t inter) {
    if (reference_mode(be)) qlt_cpu_geglu_fwd(h, gu, n, inter);
    else qlt_cpu_geglu_fwd_fast(h, gu, n, inter);
}

static void cpu_geglu_bwd(qlt_backend *be, void *dgu, const void *dh, const void *gu, int64_t n, int64_t inter) {
    if (reference_mode(be)) qlt_cpu_geglu_bwd(dgu, dh, gu, n, inter);
    else qlt_cpu_geglu_bwd_fast(dgu, dh, gu, n, inter);
}

/* x *= s: one float32 rounding per element in both modes (as torch multiplies by the scale tensor). */
static void cpu_scale_inplace(qlt_backend *be, void *x, int64_t count, float s) {
    float *v = x;
    for (int64_t i = 0; i < count; i++) v[i] *= s;
}

static void cpu_attention_softcap_fwd(qlt_backend *be, void *out, float *lse, const void *q, const void *k,
                                      const void *v, const int32_t *seg_start, int batch, int seq, int n_heads,
                                      int n_kv_heads, int head_dim, float scale, float softcap) {
    if (reference_mode(be))
        qlt_cpu_attention_softcap_fwd(out, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads, head_dim, scale,
                                      softcap);
    else
        qlt_cpu_attention_softcap_fwd_fast(out, lse, q, k, v, seg_start, batch, seq, n_heads, n_kv_heads, head_dim,
                                           scale, softcap);
}

static void cpu_attention_softcap_bwd(qlt_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                                      const void *out, const float *lse, const void *q, const void *k, const void *v,
                                      const int32_t *seg_start, int batch, int seq, int n_heads, int n_kv_heads,
                                      int head_dim, float scale, float softcap) {
    if (reference_mode(be))
        qlt_cpu_attention_softcap_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, seg_start, batch, seq, n_heads,
                                      n_kv_heads, head_dim, scale, softcap);
    else
        qlt_cpu_attention_softcap_bwd_fast(dq, dk, dv, scratch, dout, out, lse, q, k, v, seg_start, batch, seq,
                                           n_heads, n_kv_heads, head_dim, scale, softcap);
}

/* pos[0] is the number of cached positions before the new queries (backend memory is host memory here) */
static void cpu_attention_decode_softcap(qlt_backend *be, void *out, const void *q, const void *k_cache,
                                         const void *v_cache, const int32_t *pos, int64_t max_keys, int64_t n,
                                         int n_heads, int n_kv_heads, int head_dim, float scale, int window,
                                         float softcap) {
    qlt_cpu_attention_decode_softcap(out, q, k_cache, v_cache, pos[0], n, n_heads, n_kv_heads, head_dim, scale, window,
                                     softcap);
}

/* logits for evaluation: tanh in double, rounded once */
static void cpu_softcap_f32(qlt_backend *be, float *x, int64_t count, float softcap) {
    for (int64_t i = 0; i < count; i++) x[i] = (float)(softcap * tanh((double)x[i] / softcap));
}

void qlt_cpu_install_gemma_ops(qlt_backend *be) {
    be->geglu_fwd = cpu_geglu_fwd;
    be->geglu_bwd = cpu_geglu_bwd;
    be->scale_inplace = cpu_scale_inplace;
    be->attention_softcap_fwd = cpu_attention_softcap_fwd;
    be->attention_softcap_bwd = cpu_attention_softcap_bwd;
    be->lm_head_loss_softcap = qlt_cpu_lm_head_loss_softcap_op;
    be->softcap_f32 = cpu_softcap_f32;
    be->attention_decode_softcap = cpu_attention_decode_softcap;
}
