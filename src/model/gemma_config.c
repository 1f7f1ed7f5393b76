/* gemma_config.c: Gemma 2 / 3 config.json keys -> qlt_model_config (see gemma_config.h). Defaults are
 * transformers 5.24's Gemma2Config / Gemma3TextConfig ones. */
#include "model/gemma_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

/* A number key (null or absent: def); must be finite. */
static int number(const cJSON *obj, const char *key, double def, double *out, const char *path) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) return qlt_fail("%s: '%s' must be a number", path, key);
    *out = it->valuedouble;
    return 0;
}

/* A soft-cap: a positive number, or null / absent for the default (0: none). */
static int softcap(const cJSON *root, const char *key, double def, float *out, const char *path) {
    double v;
    QLT_TRY(number(root, key, def, &v, path));
    if (v < 0 || v > 1e30) return qlt_fail("%s: '%s' must be a positive number or null (got %g)", path, key, v);
    *out = (float)v;
    return 0;
}

/* One RoPE description (rope_scaling or a rope_parameters entry): rope_type default or linear (factor);
 * rope_theta when the object holds it. */
static int rope_entry(const cJSON *s, const char *where, double *theta, qlt_rope_type *type, double *factor,
                      const char *path) {
    *type = QLT_ROPE_DEFAULT;
    *factor = 1.0;
    if (!s || cJSON_IsNull(s)) return 0;
    if (!cJSON_IsObject(s)) return qlt_fail("%s: '%s' must be an object or null", path, where);
    QLT_TRY(number(s, "rope_theta", *theta, theta, path));
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!t || cJSON_IsNull(t) || (cJSON_IsString(t) && strcmp(t->valuestring, "default") == 0)) return 0;
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "linear") != 0)
        return qlt_fail("%s: %s: rope_type '%s' is not supported for Gemma (supported: default, linear)", path, where,
                        cJSON_IsString(t) ? t->valuestring : "?");
    QLT_TRY(number(s, "factor", 1.0, factor, path));
    if (!(*factor > 0)) return qlt_fail("%s: %s: linear rope scaling needs factor > 0", path, where);
    *type = QLT_ROPE_LINEAR;
    return 0;
}

/* The full-attention layers' RoPE into rope_theta / rope_type / rope_factor, the sliding layers' into
 * rope_local_*. Gemma 2 has one RoPE for both; Gemma 3 two: rope_parameters {full_attention, sliding_attention}
 * (transformers 5) or rope_theta + rope_scaling (full layers only) + rope_local_base_freq (transformers 4). */
static int parse_gemma_rope(qlt_model_config *mc, const cJSON *root, const char *path) {
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
        return qlt_fail("%s: 'rope_parameters' must be an object", path);
    if (params && cJSON_IsNull(params)) params = NULL;
    int gemma3 = mc->arch == QLT_ARCH_GEMMA3;
    QLT_TRY(number(root, "rope_theta", gemma3 ? 1000000.0 : 10000.0, &mc->rope_theta, path));
    QLT_TRY(number(root, "rope_local_base_freq", 10000.0, &mc->rope_local_theta, path));
    const cJSON *full = params, *local = NULL;
    if (params && (cJSON_GetObjectItemCaseSensitive(params, "full_attention") ||
                   cJSON_GetObjectItemCaseSensitive(params, "sliding_attention"))) {
        full = cJSON_GetObjectItemCaseSensitive(params, "full_attention");
        local = cJSON_GetObjectItemCaseSensitive(params, "sliding_attention");
    } else if (!params) {
        full = scaling;
    }
    QLT_TRY(rope_entry(full, params ? "rope_parameters.full_attention" : "rope_scaling", &mc->rope_theta,
                       &mc->rope_type, &mc->rope_factor, path));
    if (!gemma3) { /* Gemma 2: one RoPE for every layer */
        mc->rope_local_theta = mc->rope_theta;
        mc->rope_local_type = mc->rope_type;
        mc->rope_local_factor = mc->rope_factor;
    } else {
        QLT_TRY(rope_entry(local, "rope_parameters.sliding_attention", &mc->rope_local_theta, &mc->rope_local_type,
                           &mc->rope_local_factor, path));
    }
    if (!(mc->rope_theta > 0) || !(mc->rope_local_theta > 0))
        return qlt_fail("%s: the rope_theta of both layer kinds must be positive (got %g and %g)", path, mc->rope_theta,
                        mc->rope_local_theta);
    return 0;
}

/* Which layers slide: layer_types (transformers 5) or the pattern (Gemma 2: every other layer from layer 0;
 * Gemma 3: all but every sliding_window_pattern-th, default 6). */
static int parse_layer_kinds(qlt_model_config *mc, const cJSON *root, const char *path) {
    if (mc->n_layers > QLT_MAX_LAYERS)
        return qlt_fail("%s: %d layers; at most %d are supported for Gemma", path, mc->n_layers, QLT_MAX_LAYERS);
    int listed = qlt_model_parse_layer_types(mc, root, path);
    if (listed != 0) return listed < 0 ? -1 : 0;
    double pattern = 2;
    if (mc->arch == QLT_ARCH_GEMMA3) QLT_TRY(number(root, "sliding_window_pattern", 6, &pattern, path));
    if (!(pattern >= 1 && pattern <= 1e6 && pattern == floor(pattern)))
        return qlt_fail("%s: 'sliding_window_pattern' must be a positive integer (got %g)", path, pattern);
    for (int l = 0; l < mc->n_layers; l++) mc->layer_sliding[l] = (unsigned char)((l + 1) % (int)pattern != 0);
    return 0;
}

int qlt_gemma_config_parse(qlt_model_config *mc, const cJSON *root, const char *path) {
    mc->gemma = 1;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_activation");
    if (act && !cJSON_IsNull(act) && (!cJSON_IsString(act) || strcmp(act->valuestring, "gelu_pytorch_tanh") != 0))
        return qlt_fail("%s: hidden_activation '%s' is not supported (only gelu_pytorch_tanh)", path,
                        cJSON_IsString(act) ? act->valuestring : "?");
    const cJSON *bidir = cJSON_GetObjectItemCaseSensitive(root, "use_bidirectional_attention");
    if (cJSON_IsTrue(bidir))
        return qlt_fail("%s: use_bidirectional_attention true (an embedding model) is not supported: a causal LM "
                        "is needed", path);
    QLT_TRY(number(root, "query_pre_attn_scalar", 256, &mc->query_pre_attn_scalar, path));
    if (!(mc->query_pre_attn_scalar > 0))
        return qlt_fail("%s: 'query_pre_attn_scalar' must be positive (got %g)", path, mc->query_pre_attn_scalar);
    int gemma2 = mc->arch == QLT_ARCH_GEMMA2;
    QLT_TRY(softcap(root, "attn_logit_softcapping", gemma2 ? 50.0 : 0.0, &mc->attn_softcap, path));
    QLT_TRY(softcap(root, "final_logit_softcapping", gemma2 ? 30.0 : 0.0, &mc->final_softcap, path));
    /* a present null means none, whatever the class default */
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "attn_logit_softcapping"))) mc->attn_softcap = 0;
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "final_logit_softcapping"))) mc->final_softcap = 0;
    QLT_TRY(parse_gemma_rope(mc, root, path));
    return parse_layer_kinds(mc, root, path);
}

void qlt_gemma_describe(const qlt_model_config *mc, char *buf, size_t size) {
    if (size) buf[0] = '\0';
    if (!mc->gemma) return;
    char caps[96] = "none";
    if (mc->attn_softcap > 0 || mc->final_softcap > 0)
        snprintf(caps, sizeof caps, "attention scores %g, final logits %g (cap tanh(x / cap); 0 = none)",
                 mc->attn_softcap, mc->final_softcap);
    char local[64], full[64];
    snprintf(local, sizeof local, "%g", mc->rope_local_theta);
    snprintf(full, sizeof full, "%g", mc->rope_theta);
    if (mc->rope_local_type == QLT_ROPE_LINEAR)
        snprintf(local + strlen(local), sizeof local - strlen(local), " (linear x%g)", mc->rope_local_factor);
    if (mc->rope_type == QLT_ROPE_LINEAR)
        snprintf(full + strlen(full), sizeof full - strlen(full), " (linear x%g)", mc->rope_factor);
    char pattern[40];
    int n = mc->n_layers < 32 ? mc->n_layers : 32;
    for (int l = 0; l < n; l++) pattern[l] = mc->layer_sliding[l] ? 'S' : 'F';
    snprintf(pattern + n, sizeof pattern - (size_t)n, "%s", mc->n_layers > n ? "..." : "");
    snprintf(buf, size,
             "norms: RMSNorm x (1 + w), 4 a layer (before and after attention, before and after the MLP)%s\n"
             "mlp: GeGLU, gelu_pytorch_tanh(gate) * up; embeddings x sqrt(hidden) = %g\n"
             "attention scale: query_pre_attn_scalar %g ** -0.5; soft-caps: %s\n"
             "layer kinds: %s (S sliding window %d, F full)\n"
             "rope base: sliding layers %s, full layers %s",
             mc->qk_norm ? ", q/k norm per head" : "", sqrt((double)mc->hidden), mc->query_pre_attn_scalar, caps,
             pattern, mc->sliding_window, local, full);
}
