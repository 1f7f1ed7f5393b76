/* model_config.c: config.json or GGUF metadata -> qlt_model_config (see model_config.h). */
#include "model/model_config.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "formats/bnb_checkpoint.h"
#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "model/gemma_config.h"
#include "model/longrope.h"

static const struct {
    const char *name;
    qlt_arch arch;
} known_archs[] = {
    {"LlamaForCausalLM", QLT_ARCH_LLAMA},
    {"Qwen2ForCausalLM", QLT_ARCH_QWEN2},
    {"Qwen3ForCausalLM", QLT_ARCH_QWEN3},
    {"MistralForCausalLM", QLT_ARCH_MISTRAL},
    {"Gemma2ForCausalLM", QLT_ARCH_GEMMA2},
    {"Gemma3ForCausalLM", QLT_ARCH_GEMMA3},
    {"Phi3ForCausalLM", QLT_ARCH_PHI3},
};

static int get_int(const cJSON *root, const char *key, int required, int def, int *out, const char *path) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) {
        if (required) return qlt_fail("%s: missing key '%s'", path, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
        it->valuedouble > 1e9)
        return qlt_fail("%s: '%s' must be a non-negative integer", path, key);
    *out = (int)it->valuedouble;
    return 0;
}

static int get_double(const cJSON *root, const char *key, double def, double *out, const char *path) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(it)) return qlt_fail("%s: '%s' must be a number", path, key);
    *out = it->valuedouble;
    return 0;
}

int qlt_model_parse_layer_types(qlt_model_config *mc, const cJSON *root, const char *path) {
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (!types || cJSON_IsNull(types)) return 0;
    if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != mc->n_layers)
        return qlt_fail("%s: 'layer_types' must be a list of num_hidden_layers (%d) strings", path, mc->n_layers);
    for (int l = 0; l < mc->n_layers; l++) {
        const cJSON *t = cJSON_GetArrayItem(types, l);
        int full = cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0;
        int slide = cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0;
        if (!full && !slide)
            return qlt_fail("%s: layer_types[%d] must be \"full_attention\" or \"sliding_attention\"", path, l);
        mc->layer_sliding[l] = (unsigned char)slide;
    }
    return 1;
}

static int get_bool(const cJSON *root, const char *key, int def, int *out, const char *path) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(it)) return qlt_fail("%s: '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(it);
    return 0;
}

/* Sliding-window attention as transformers 5 decides it. Mistral: every layer slides when
 * sliding_window is a number (MistralConfig's default 4096 when the key is absent, none when null). Qwen2 /
 * Qwen3: only with use_sliding_window true (default false); then layer_types names each layer's kind when
 * config.json has it (transformers 5), else the layers from max_window_layers (default 28) on slide. Llama
 * has no sliding window. A sliding layer's query t sees keys j with t - j < sliding_window. */
static int parse_sliding_window(qlt_model_config *mc, const cJSON *root, const char *path) {
    mc->sliding_window = 0;
    if (mc->arch == QLT_ARCH_LLAMA) return 0;
    int qwen = mc->arch == QLT_ARCH_QWEN2 || mc->arch == QLT_ARCH_QWEN3;
    int use = 1;
    if (qwen) QLT_TRY(get_bool(root, "use_sliding_window", 0, &use, path));
    if (!use) return 0;
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (sw && cJSON_IsNull(sw)) return 0;
    if (!sw && mc->arch == QLT_ARCH_PHI3) return 0; /* Phi3Config's default is none */
    int window;
    QLT_TRY(get_int(root, "sliding_window", 0, 4096, &window, path));
    if (window < 1) return qlt_fail("%s: 'sliding_window' must be a positive integer or null (got %d)", path, window);
    if (mc->n_layers > QLT_MAX_LAYERS)
        return qlt_fail("%s: %d layers with sliding-window attention; at most %d are supported", path, mc->n_layers,
                        QLT_MAX_LAYERS);
    mc->sliding_window = window;
    if (!qwen) {
        memset(mc->layer_sliding, 1, (size_t)mc->n_layers);
        return 0;
    }
    int listed = qlt_model_parse_layer_types(mc, root, path);
    if (listed != 0) return listed < 0 ? -1 : 0;
    int from;
    QLT_TRY(get_int(root, "max_window_layers", 0, 28, &from, path));
    for (int l = from; l < mc->n_layers; l++) mc->layer_sliding[l] = 1;
    return 0;
}

/* "layer a" or "layers a-b" */
static void layer_range(char *buf, size_t size, int a, int b) {
    if (a == b) snprintf(buf, size, "layer %d", a);
    else snprintf(buf, size, "layers %d-%d", a, b);
}

void qlt_model_describe_attention(const qlt_model_config *mc, char *buf, size_t size) {
    int n = 0, first = -1, last = -1, layers = mc->n_layers < QLT_MAX_LAYERS ? mc->n_layers : QLT_MAX_LAYERS;
    for (int l = 0; l < layers && mc->sliding_window > 0; l++) {
        if (!mc->layer_sliding[l]) continue;
        if (first < 0) first = l;
        last = l;
        n++;
    }
    char slide[48], full[48];
    if (n == 0) {
        snprintf(buf, size, "full causal");
    } else if (n == mc->n_layers) {
        snprintf(buf, size, "sliding window %d on every layer", mc->sliding_window);
    } else if (last - first + 1 == n && last == mc->n_layers - 1) { /* Qwen2's max_window_layers layout */
        layer_range(slide, sizeof slide, first, last);
        layer_range(full, sizeof full, 0, first - 1);
        snprintf(buf, size, "sliding window %d on %s (full causal on %s)", mc->sliding_window, slide, full);
    } else {
        snprintf(buf, size, "sliding window %d on %d of %d layers (full causal on the others)", mc->sliding_window, n,
                 mc->n_layers);
    }
}

int qlt_model_window_matters(const qlt_model_config *mc, int seq) {
    if (mc->sliding_window <= 0 || mc->sliding_window >= seq) return 0;
    for (int l = 0; l < mc->n_layers && l < QLT_MAX_LAYERS; l++)
        if (mc->layer_sliding[l]) return 1;
    return 0;
}

static int parse_rope(qlt_model_config *mc, const cJSON *root, const char *path) {
    /* transformers 5 nests everything under rope_parameters; older files use rope_theta + rope_scaling. */
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (params && !cJSON_IsObject(params)) return qlt_fail("%s: 'rope_parameters' must be an object", path);
    if (scaling && !cJSON_IsNull(scaling) && !cJSON_IsObject(scaling))
        return qlt_fail("%s: 'rope_scaling' must be an object or null", path);
    QLT_TRY(get_double(root, "rope_theta", 10000.0, &mc->rope_theta, path));
    if (params) QLT_TRY(get_double(params, "rope_theta", mc->rope_theta, &mc->rope_theta, path));
    const cJSON *s = params ? params : (cJSON_IsObject(scaling) ? scaling : NULL);
    mc->rope_type = QLT_ROPE_DEFAULT;
    if (mc->arch == QLT_ARCH_PHI3) QLT_TRY(qlt_longrope_parse_partial(mc, params, root, path));
    if (!s) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "rope_type");
    if (!type) type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!type || cJSON_IsNull(type) || (cJSON_IsString(type) && strcmp(type->valuestring, "default") == 0)) return 0;
    if (!cJSON_IsString(type)) return qlt_fail("%s: rope_type must be a string", path);
    const char *tn = type->valuestring; /* transformers reads Phi-3's "su" and "yarn" as longrope */
    if (strcmp(tn, "longrope") == 0 || (mc->arch == QLT_ARCH_PHI3 && (strcmp(tn, "su") == 0 || strcmp(tn, "yarn") == 0)))
        return qlt_longrope_parse(mc, s, root, path);
    if (strcmp(type->valuestring, "llama3") != 0)
        return qlt_fail("%s: rope_type '%s' is not supported (supported: default, llama3, longrope)", path,
                        type->valuestring);
    mc->rope_type = QLT_ROPE_LLAMA3;
    QLT_TRY(get_double(s, "factor", 8.0, &mc->rope_factor, path));
    QLT_TRY(get_double(s, "low_freq_factor", 1.0, &mc->rope_low_freq_factor, path));
    QLT_TRY(get_double(s, "high_freq_factor", 4.0, &mc->rope_high_freq_factor, path));
    QLT_TRY(get_int(s, "original_max_position_embeddings", 0, 8192, &mc->rope_original_max_pos, path));
    if (mc->rope_factor <= 0 || mc->rope_high_freq_factor <= mc->rope_low_freq_factor)
        return qlt_fail("%s: llama3 rope scaling needs factor > 0 and high_freq_factor > low_freq_factor", path);
    return 0;
}

int qlt_model_config_parse(qlt_model_config *mc, const char *json_text, const char *path) {
    memset(mc, 0, sizeof *mc);
    cJSON *root = cJSON_Parse(json_text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return qlt_fail("%s: not a JSON object (is this a Hugging Face config.json?)", path);
    }
    int rc = -1;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (!cJSON_IsString(a0)) {
        qlt_fail("%s: missing 'architectures' (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                 "MistralForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM)", path);
        goto done;
    }
    int found = 0;
    for (size_t i = 0; i < sizeof known_archs / sizeof known_archs[0]; i++) {
        if (strcmp(a0->valuestring, known_archs[i].name) == 0) {
            mc->arch = known_archs[i].arch;
            found = 1;
        }
    }
    if (!found) {
        /* the multimodal Gemma 3 is asked for by name: say what loads */
        const char *why = strcmp(a0->valuestring, "Gemma3ForConditionalGeneration") == 0
                              ? " (the text model is: a Gemma3ForCausalLM directory of its text_config and "
                                "language model weights)"
                              : "";
        qlt_fail("%s: architecture '%s' is not supported%s (supported: LlamaForCausalLM, Qwen2ForCausalLM, "
                 "Qwen3ForCausalLM, MistralForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM)", path,
                 a0->valuestring, why);
        goto done;
    }
    snprintf(mc->arch_name, sizeof mc->arch_name, "%s", a0->valuestring);
    const int gemma = qlt_arch_is_gemma(mc->arch); /* Gemma's activation: gemma_config.c */
    const cJSON *act = gemma ? NULL : cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (act && !cJSON_IsNull(act) && !cJSON_IsString(act)) {
        qlt_fail("%s: hidden_act must be a string (only \"silu\" is supported)", path);
        goto done;
    }
    if (cJSON_IsString(act) && strcmp(act->valuestring, "silu") != 0) {
        qlt_fail("%s: hidden_act '%s' is not supported (only silu)", path, act->valuestring);
        goto done;
    }
    if (get_int(root, "hidden_size", 1, 0, &mc->hidden, path) || get_int(root, "num_hidden_layers", 1, 0, &mc->n_layers, path) ||
        get_int(root, "num_attention_heads", 1, 0, &mc->n_heads, path) ||
        get_int(root, "intermediate_size", 1, 0, &mc->intermediate, path) ||
        get_int(root, "vocab_size", 1, 0, &mc->vocab, path) ||
        get_int(root, "num_key_value_heads", 0, mc->n_heads, &mc->n_kv_heads, path))
        goto done;
    if (mc->hidden <= 0 || mc->n_layers <= 0 || mc->n_heads <= 0 || mc->n_kv_heads <= 0 || mc->intermediate <= 0 ||
        mc->vocab <= 0) {
        qlt_fail("%s: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size "
                 "and vocab_size must be positive", path);
        goto done;
    }
    if (get_int(root, "head_dim", 0, gemma ? 256 : mc->hidden / mc->n_heads, &mc->head_dim, path)) goto done;
    const cJSON *max_pos = cJSON_GetObjectItemCaseSensitive(root, "max_position_embeddings"); /* informational */
    mc->context_length = cJSON_IsNumber(max_pos) && max_pos->valuedouble >= 1 && max_pos->valuedouble <= 1e9
                             ? (int)max_pos->valuedouble
                             : 0;
    if (parse_sliding_window(mc, root, path)) goto done;
    if (mc->head_dim <= 0 || mc->head_dim % 2 || mc->head_dim > 512) { /* 512: the CPU attention's row buffer */
        qlt_fail("%s: head_dim must be a positive even number of at most 512 (got %d)", path, mc->head_dim);
        goto done;
    }
    if (mc->n_heads % mc->n_kv_heads) {
        qlt_fail("%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", path, mc->n_heads,
                 mc->n_kv_heads);
        goto done;
    }
    double eps;
    if (get_double(root, "rms_norm_eps", 1e-6, &eps, path)) goto done;
    if (!(eps >= 0 && eps <= FLT_MAX)) { /* a negative or overflowing eps makes every norm NaN */
        qlt_fail("%s: rms_norm_eps must be a number >= 0 that fits a 32-bit float (got %g)", path, eps);
        goto done;
    }
    mc->rms_eps = (float)eps;
    if (gemma ? qlt_gemma_config_parse(mc, root, path) : parse_rope(mc, root, path)) goto done;
    if (!(mc->rope_theta > 0 && isfinite(mc->rope_theta))) { /* theta <= 0 makes the rotary angles NaN */
        qlt_fail("%s: rope_theta must be a positive number (got %g)", path, mc->rope_theta);
        goto done;
    }
    if (get_bool(root, "tie_word_embeddings", gemma, &mc->tie_word_embeddings, path)) goto done;
    if (get_bool(root, "attention_bias", mc->arch == QLT_ARCH_QWEN2, &mc->attention_bias, path)) goto done;
    if (mc->arch == QLT_ARCH_QWEN2) mc->attention_bias = 1; /* Qwen2 always has q/k/v bias */
    mc->qk_norm = mc->arch == QLT_ARCH_QWEN3 || mc->arch == QLT_ARCH_GEMMA3;
    int mlp_bias = 0;
    if (get_bool(root, "mlp_bias", 0, &mlp_bias, path)) goto done;
    if (mlp_bias) {
        qlt_fail("%s: mlp_bias = true is not supported", path);
        goto done;
    }
    if (qlt_bnb_check_config(cJSON_GetObjectItemCaseSensitive(root, "quantization_config"), path, NULL) < 0)
        goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

int qlt_model_config_load(qlt_model_config *mc, const char *dir) {
    char *path = qlt_path_join(dir, "config.json");
    char *text = NULL;
    int rc = qlt_read_file(path, &text, NULL);
    if (rc == 0) rc = qlt_model_config_parse(mc, text, path);
    free(text);
    free(path);
    return rc;
}

/* ---- GGUF metadata ---- */

static const struct {
    const char *gguf;   /* general.architecture */
    const char *hf;     /* the Hugging Face class it stands for */
    qlt_arch arch;
} gguf_archs[] = {
    {"llama", "LlamaForCausalLM", QLT_ARCH_LLAMA},
    {"mistral", "MistralForCausalLM", QLT_ARCH_MISTRAL},
    {"qwen2", "Qwen2ForCausalLM", QLT_ARCH_QWEN2},
    {"qwen3", "Qwen3ForCausalLM", QLT_ARCH_QWEN3},
};

/* <arch>.<suffix> as an int in [lo, 1e9]; required or def. */
static int gguf_int(const qlt_gguf *g, const char *arch, const char *suffix, int required, int64_t def, int lo,
                    int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    int found = qlt_gguf_get_int(g, key, def, &v);
    if (found < 0) return -1;
    if (!found && required) return qlt_fail("%s: missing key '%s' (not a complete llama.cpp model file?)", g->path, key);
    if (v < lo || v > 1000000000)
        return qlt_fail("%s: key '%s' is %lld; it must be between %d and 1e9", g->path, key, (long long)v, lo);
    *out = (int)v;
    return 0;
}

static int gguf_double(const qlt_gguf *g, const char *arch, const char *suffix, int required, double def,
                       double *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int found = qlt_gguf_get_float(g, key, def, out);
    if (found < 0) return -1;
    if (!found && required) return qlt_fail("%s: missing key '%s' (not a complete llama.cpp model file?)", g->path, key);
    if (!isfinite(*out)) return qlt_fail("%s: key '%s' is not a finite number", g->path, key);
    return 0;
}

/* RoPE: rope.scaling.type none (or absent) with optional rope_freqs.weight divisors; others refused. */
static int gguf_rope(qlt_model_config *mc, const qlt_gguf *g, const char *arch) {
    char key[128];
    const char *type;
    uint64_t len;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    QLT_TRY(qlt_gguf_get_string(g, key, &type, &len) < 0 ? -1 : 0);
    if (type && !(len == 4 && memcmp(type, "none", 4) == 0))
        return qlt_fail("%s: key '%s' is \"%.*s\"; rope scaling of that kind is not supported (supported: none, and "
                        "Llama-3's frequency factors in rope_freqs.weight)", g->path, key, (int)(len > 64 ? 64 : len),
                        type);
    double linear;
    snprintf(key, sizeof key, "%s.rope.scale_linear", arch);
    if (qlt_gguf_get_float(g, key, 1.0, &linear) < 0) return -1;
    if (linear != 1.0) return qlt_fail("%s: key '%s' is %g; linear rope scaling is not supported", g->path, key, linear);
    mc->rope_type = QLT_ROPE_DEFAULT;
    const qlt_gguf_tensor *t = qlt_gguf_find_tensor(g, "rope_freqs.weight");
    if (!t) return 0;
    int half = mc->head_dim / 2;
    if (t->ndim != 1 || t->ne[0] != half)
        return qlt_fail("%s: tensor 'rope_freqs.weight' has %lld values; head_dim %d implies %d", g->path,
                        (long long)t->numel, mc->head_dim, half);
    QLT_TRY(qlt_gguf_tensor_to_f32(g, t, mc->rope_factors));
    for (int i = 0; i < half; i++)
        if (!(mc->rope_factors[i] > 0 && isfinite(mc->rope_factors[i])))
            return qlt_fail("%s: tensor 'rope_freqs.weight': value %d is %g; frequency factors must be positive", g->path,
                            i, mc->rope_factors[i]);
    mc->rope_type = QLT_ROPE_FACTORS;
    return 0;
}

int qlt_model_config_from_gguf(qlt_model_config *mc, const qlt_gguf *g) {
    memset(mc, 0, sizeof *mc);
    const char *s;
    uint64_t len;
    if (qlt_gguf_get_string(g, "general.architecture", &s, &len) < 0) return -1;
    if (!s) return qlt_fail("%s: missing key 'general.architecture' (not a llama.cpp model file?)", g->path);
    char arch[64];
    snprintf(arch, sizeof arch, "%.*s", (int)(len < 63 ? len : 63), s);
    int found = 0;
    for (size_t i = 0; i < sizeof gguf_archs / sizeof gguf_archs[0]; i++) {
        if (strlen(gguf_archs[i].gguf) == len && memcmp(s, gguf_archs[i].gguf, len) == 0) {
            mc->arch = gguf_archs[i].arch;
            snprintf(mc->arch_name, sizeof mc->arch_name, "%s", gguf_archs[i].hf);
            found = 1;
        }
    }
    if (!found)
        return qlt_fail("%s: general.architecture '%s' is not supported (supported: llama, mistral, qwen2, qwen3)",
                        g->path, arch);
    int experts = 0;
    QLT_TRY(gguf_int(g, arch, "expert_count", 0, 0, 0, &experts));
    if (experts > 0)
        return qlt_fail("%s: %s.expert_count is %d: mixture-of-experts models are not supported", g->path, arch, experts);
    QLT_TRY(gguf_int(g, arch, "block_count", 1, 0, 1, &mc->n_layers));
    QLT_TRY(gguf_int(g, arch, "embedding_length", 1, 0, 1, &mc->hidden));
    QLT_TRY(gguf_int(g, arch, "feed_forward_length", 1, 0, 1, &mc->intermediate));
    QLT_TRY(gguf_int(g, arch, "attention.head_count", 1, 0, 1, &mc->n_heads));
    QLT_TRY(gguf_int(g, arch, "attention.head_count_kv", 0, mc->n_heads, 1, &mc->n_kv_heads));
    QLT_TRY(gguf_int(g, arch, "attention.key_length", 0, mc->hidden / mc->n_heads, 1, &mc->head_dim));
    int value_length, rope_dims;
    QLT_TRY(gguf_int(g, arch, "attention.value_length", 0, mc->head_dim, 1, &value_length));
    QLT_TRY(gguf_int(g, arch, "rope.dimension_count", 0, mc->head_dim, 1, &rope_dims));
    QLT_TRY(gguf_int(g, arch, "context_length", 0, 0, 0, &mc->context_length));
    QLT_TRY(gguf_int(g, arch, "attention.sliding_window", 0, 0, 0, &mc->sliding_window));
    if (mc->sliding_window > 0 && mc->n_layers > QLT_MAX_LAYERS)
        return qlt_fail("%s: %d layers with %s.attention.sliding_window; at most %d are supported", g->path,
                        mc->n_layers, arch, QLT_MAX_LAYERS);
    if (mc->sliding_window > 0) memset(mc->layer_sliding, 1, (size_t)mc->n_layers); /* llama.cpp: every layer */
    if (value_length != mc->head_dim)
        return qlt_fail("%s: %s.attention.value_length (%d) differs from key_length (%d), which is not supported",
                        g->path, arch, value_length, mc->head_dim);
    if (rope_dims != mc->head_dim)
        return qlt_fail("%s: %s.rope.dimension_count is %d but heads have %d dims: partial rotary embeddings are not "
                        "supported", g->path, arch, rope_dims, mc->head_dim);
    if (mc->head_dim % 2 || mc->head_dim > 512)
        return qlt_fail("%s: head_dim must be an even number of at most 512 (got %d from %s.attention.key_length or "
                        "embedding_length / head_count)", g->path, mc->head_dim, arch);
    if (mc->n_heads % mc->n_kv_heads)
        return qlt_fail("%s: %s.attention.head_count (%d) must be a multiple of head_count_kv (%d)", g->path, arch,
                        mc->n_heads, mc->n_kv_heads);
    double eps;
    QLT_TRY(gguf_double(g, arch, "attention.layer_norm_rms_epsilon", 1, 0, &eps));
    if (!(eps >= 0 && eps <= FLT_MAX))
        return qlt_fail("%s: %s.attention.layer_norm_rms_epsilon must be >= 0 and fit a 32-bit float (got %g)", g->path,
                        arch, eps);
    mc->rms_eps = (float)eps;
    QLT_TRY(gguf_double(g, arch, "rope.freq_base", 0, 10000.0, &mc->rope_theta));
    if (!(mc->rope_theta > 0))
        return qlt_fail("%s: %s.rope.freq_base must be positive (got %g)", g->path, arch, mc->rope_theta);
    QLT_TRY(gguf_rope(mc, g, arch));
    /* the vocabulary: the token list when there is one (llama.cpp pads it to the embedding's rows) */
    const qlt_gguf_kv *tokens;
    if (qlt_gguf_get_array(g, "tokenizer.ggml.tokens", QLT_GGUF_VAL_STRING, &tokens) < 0) return -1;
    int64_t vocab = tokens ? (int64_t)tokens->count : 0;
    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    if (!tokens && qlt_gguf_get_int(g, key, 0, &vocab) < 0) return -1;
    if (vocab <= 0 || vocab > 1000000000)
        return qlt_fail("%s: no vocabulary size: neither tokenizer.ggml.tokens nor %s holds one", g->path, key);
    mc->vocab = (int)vocab;
    mc->tie_word_embeddings = qlt_gguf_find_tensor(g, "output.weight") == NULL;
    mc->attention_bias = mc->arch == QLT_ARCH_QWEN2 || qlt_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    mc->qk_norm = mc->arch == QLT_ARCH_QWEN3;
    return 0;
}

void qlt_model_rope_inv_freq(const qlt_model_config *mc, float *inv_freq) {
    if (mc->rope_type == QLT_ROPE_LONGROPE) {
        qlt_longrope_inv_freq(mc, 0, inv_freq);
        return;
    }
    int dim = qlt_model_rotary_dim(mc), half = dim / 2;
    for (int i = 0; i < half; i++) {
        /* transformers: 1 / theta ** (arange(0, dim, 2).float() / dim), computed in float32 */
        float expo = (float)(2 * i) / (float)dim;
        double f = 1.0 / pow(mc->rope_theta, (double)expo);
        if (mc->rope_type == QLT_ROPE_FACTORS) f /= mc->rope_factors[i]; /* llama.cpp: theta / freq_factor */
        if (mc->rope_type == QLT_ROPE_LINEAR) f /= mc->rope_factor;         /* transformers: inv_freq / factor */
        if (mc->rope_type == QLT_ROPE_LLAMA3) {
            double low_wavelen = mc->rope_original_max_pos / mc->rope_low_freq_factor;
            double high_wavelen = mc->rope_original_max_pos / mc->rope_high_freq_factor;
            double wavelen = 2 * M_PI / f;
            if (wavelen > low_wavelen) {
                f = f / mc->rope_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (mc->rope_original_max_pos / wavelen - mc->rope_low_freq_factor) /
                                (mc->rope_high_freq_factor - mc->rope_low_freq_factor);
                f = (1 - smooth) * f / mc->rope_factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}

void qlt_model_rope_inv_freq_local(const qlt_model_config *mc, float *inv_freq) {
    qlt_model_config local = *mc; /* the same formula over the sliding layers' base and scaling */
    if (mc->gemma) {
        local.rope_theta = mc->rope_local_theta;
        local.rope_type = mc->rope_local_type;
        local.rope_factor = mc->rope_local_factor;
    }
    qlt_model_rope_inv_freq(&local, inv_freq);
}

/* Gemma: query_pre_attn_scalar ** -0.5 */
float qlt_model_attn_scale(const qlt_model_config *mc) {
    return (float)pow(mc->query_pre_attn_scalar > 0 ? mc->query_pre_attn_scalar : (double)mc->head_dim, -0.5);
}

void qlt_model_proj_shape(const qlt_model_config *mc, int p, int64_t *rows, int64_t *cols) {
    int64_t h = mc->hidden, qd = (int64_t)mc->n_heads * mc->head_dim, kvd = (int64_t)mc->n_kv_heads * mc->head_dim;
    int64_t inter = mc->intermediate;
    const int64_t shape[7][2] = {{qd, h}, {kvd, h}, {kvd, h}, {h, qd}, {inter, h}, {inter, h}, {h, inter}};
    QLT_ASSERT(p >= 0 && p < 7);
    *rows = shape[p][0];
    *cols = shape[p][1];
}

int64_t qlt_model_linear_params(const qlt_model_config *mc) {
    int64_t per_layer = 0;
    for (int p = 0; p < 7; p++) {
        int64_t rows, cols;
        qlt_model_proj_shape(mc, p, &rows, &cols);
        per_layer += rows * cols;
    }
    return per_layer * mc->n_layers;
}

int64_t qlt_model_total_params(const qlt_model_config *mc) {
    int64_t h = mc->hidden, q = (int64_t)mc->n_heads * mc->head_dim, kv = (int64_t)mc->n_kv_heads * mc->head_dim;
    int64_t per_layer = (mc->gemma ? 4 : 2) * h + (mc->attention_bias ? q + 2 * kv : 0) + (mc->qk_norm ? 2 * mc->head_dim : 0);
    int64_t emb = (int64_t)mc->vocab * h;
    return qlt_model_linear_params(mc) + per_layer * mc->n_layers + h + emb * (mc->tie_word_embeddings ? 1 : 2);
}
