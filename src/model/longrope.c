/* longrope.c: Phi-3's LongRoPE and partial rotary settings (see longrope.h). */
#include "model/longrope.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

/* key of obj as a list of exactly n positive numbers */
static int factor_list(const cJSON *obj, const char *key, int n, float *out, const char *path) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return qlt_fail("%s: LongRoPE's '%s' must be a list of %d numbers (rotary dims / 2)", path, key, n);
    int i = 0;
    for (const cJSON *it = a->child; it; it = it->next, i++) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble > 0) || !isfinite(it->valuedouble))
            return qlt_fail("%s: LongRoPE's '%s'[%d] must be a positive number", path, key, i);
        out[i] = (float)it->valuedouble;
    }
    return 0;
}

/* key of obj as a positive number, or def when absent / null */
static int positive(const cJSON *obj, const char *key, double def, double *out, const char *path) {
    const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!it || cJSON_IsNull(it)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(it) || !(it->valuedouble > 0) || !isfinite(it->valuedouble))
        return qlt_fail("%s: '%s' must be a positive number", path, key);
    *out = it->valuedouble;
    return 0;
}

int qlt_longrope_parse_partial(qlt_model_config *mc, const cJSON *params, const cJSON *root, const char *path) {
    double factor;
    QLT_TRY(positive(root, "partial_rotary_factor", 1.0, &factor, path));
    if (params) QLT_TRY(positive(params, "partial_rotary_factor", factor, &factor, path));
    if (factor > 1.0) return qlt_fail("%s: 'partial_rotary_factor' must be in (0, 1] (got %g)", path, factor);
    int dim = (int)(mc->head_dim * factor); /* transformers: int(head_dim * partial_rotary_factor) */
    if (dim < 2 || dim % 2)
        return qlt_fail("%s: partial_rotary_factor %g gives %d rotary dims of head_dim %d; they must be even and "
                        "at least 2", path, factor, dim, mc->head_dim);
    mc->rotary_dim = dim;
    return 0;
}

int qlt_longrope_parse(qlt_model_config *mc, const cJSON *s, const cJSON *root, const char *path) {
    int half = qlt_model_rotary_dim(mc) / 2;
    if (half > QLT_MAX_ROPE_FACTORS)
        return qlt_fail("%s: LongRoPE with %d rotary dims; at most %d are supported", path, 2 * half,
                        2 * QLT_MAX_ROPE_FACTORS);
    QLT_TRY(factor_list(s, "short_factor", half, mc->rope_short_factor, path));
    QLT_TRY(factor_list(s, "long_factor", half, mc->rope_long_factor, path));
    double max_pos, orig, factor, attn;
    QLT_TRY(positive(root, "max_position_embeddings", 4096, &max_pos, path));
    /* Phi-3 keeps the pretraining length at the top level, and transformers gives it priority */
    QLT_TRY(positive(s, "original_max_position_embeddings", max_pos, &orig, path));
    QLT_TRY(positive(root, "original_max_position_embeddings", orig, &orig, path));
    if (orig > 1e9 || orig != floor(orig))
        return qlt_fail("%s: 'original_max_position_embeddings' must be a whole number of at most 1e9", path);
    QLT_TRY(positive(s, "factor", max_pos / orig, &factor, path));
    QLT_TRY(positive(s, "attention_factor", factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log(orig)), &attn, path));
    if (orig < 2 && factor > 1.0 && !cJSON_GetObjectItemCaseSensitive(s, "attention_factor"))
        return qlt_fail("%s: 'original_max_position_embeddings' must be at least 2", path);
    mc->rope_type = QLT_ROPE_LONGROPE;
    mc->rope_original_max_pos = (int)orig;
    mc->rope_factor = factor;
    mc->rope_attn_factor = (float)attn; /* torch multiplies the float32 cos / sin by it as a float32 */
    return 0;
}

void qlt_longrope_inv_freq(const qlt_model_config *mc, int long_factors, float *inv_freq) {
    int dim = qlt_model_rotary_dim(mc);
    const float *ext = long_factors ? mc->rope_long_factor : mc->rope_short_factor;
    for (int i = 0; i < dim / 2; i++) {
        float expo = (float)(2 * i) / (float)dim;
        float base_pow = (float)pow(mc->rope_theta, (double)expo); /* theta ** shape, a float32 tensor */
        float denom = ext[i] * base_pow;
        inv_freq[i] = 1.0f / denom;
    }
}

void qlt_longrope_describe(const qlt_model_config *mc, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = 0;
    if (mc->rope_type == QLT_ROPE_LONGROPE)
        at += (size_t)snprintf(buf, size, "LongRoPE: short factors while a batch's positions stay below %d "
                               "(original_max_position_embeddings), long factors past it; cos / sin times %.6g",
                               mc->rope_original_max_pos, (double)mc->rope_attn_factor);
    if (at < size && qlt_model_rotary_dim(mc) != mc->head_dim)
        snprintf(buf + at, size - at, "%spartial rotary: the first %d of %d dims of each head rotate", at ? "; " : "",
                 qlt_model_rotary_dim(mc), mc->head_dim);
}
