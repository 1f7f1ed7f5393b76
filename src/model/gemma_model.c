/* gemma_model.c: Gemma 2 / 3 at load and at the model's edges (see gemma_model.h): the (1 + w) norms folded
 * into the stored weights, the refusal on backends without Gemma's ops, the sliding layers' RoPE, the
 * embeddings' scale and the soft-capped logits. */
#include "model/gemma_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"

void qlt_gemma_fold_norm(const qlt_model_config *mc, const char *name, float *w, int64_t n) {
    static const char suffix[] = "norm.weight";
    size_t len = strlen(name), k = sizeof suffix - 1;
    if (!mc->gemma || len < k || strcmp(name + len - k, suffix) != 0) return;
    for (int64_t i = 0; i < n; i++) w[i] = 1.0f + w[i];
}

int qlt_gemma_backend_check(const qlt_model_config *mc, const qlt_backend *be, const char *where) {
    if (!mc->gemma) return 0;
    if (be->geglu_fwd && be->geglu_bwd && be->scale_inplace && be->attention_softcap_fwd && be->attention_softcap_bwd &&
        be->lm_head_loss_softcap && be->softcap_f32 && be->attention_decode_softcap)
        return 0;
    return qlt_fail("%s: %s runs on the CPU backend only: the %s backend has no GeGLU / soft-cap kernels yet (set "
                    "train.device: cpu)", where, mc->arch_name, be->name);
}

int qlt_gemma_finish(qlt_model *m) {
    if (!m->cfg.gemma) return 0;
    size_t bytes = sizeof(float) * (size_t)(m->cfg.head_dim / 2);
    float *inv = qlt_xmalloc(bytes);
    qlt_model_rope_inv_freq_local(&m->cfg, inv);
    m->inv_freq_local = m->be->alloc(m->be, bytes);
    if (m->inv_freq_local) m->be->upload(m->be, m->inv_freq_local, inv, bytes);
    free(inv);
    if (!m->inv_freq_local) return qlt_fail("out of %s memory", m->be->name);
    return 0;
}

float qlt_gemma_embed_scale(const qlt_model_config *mc, qlt_dtype act_dtype) {
    float s = (float)sqrt((double)mc->hidden); /* hidden_size ** 0.5 as a float32 tensor */
    if (act_dtype == QLT_DTYPE_BF16) s = qlt_bf16_to_f32(qlt_f32_to_bf16(s));
    if (act_dtype == QLT_DTYPE_F16) s = qlt_f16_to_f32(qlt_f32_to_f16(s));
    return s;
}

void qlt_model_logits(const qlt_model *m, float *out, const void *x, int64_t n) {
    qlt_backend *be = m->be;
    be->logits(be, out, x, &m->lm_head, n);
    if (m->cfg.final_softcap > 0) be->softcap_f32(be, out, n * m->cfg.vocab, m->cfg.final_softcap);
}
