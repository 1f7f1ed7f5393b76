/* test_gemma_model.c: Gemma 2 / 3 at the model layer, outside the goldens (test_golden.c, test_train.c): config.json
 * as the hub's checkpoints spell it (transformers 4: rope_scaling, rope_local_base_freq, sliding_window_pattern,
 * absent defaults) read to the same architecture as transformers 5's spelling (layer_types, rope_parameters per
 * layer type), the values transformers derives (layer kinds, both RoPEs, the attention scale, the embeddings'
 * scale), one-line errors for what is not supported, the refusal on a backend without Gemma's ops before any
 * weight is read, and `inspect` explaining the architecture. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "cpu/backend_cpu.h"
#include "model/gemma_config.h"
#include "model/gemma_model.h"
#include "model/model.h"
#include "test_util.h"

/* google/gemma-2-2b's config.json (transformers 4 keys; no tie_word_embeddings, no layer_types) */
static const char gemma2_hub[] =
    "{\"architectures\": [\"Gemma2ForCausalLM\"], \"attn_logit_softcapping\": 50.0, \"bos_token_id\": 2, "
    "\"cache_implementation\": \"hybrid\", \"eos_token_id\": 1, \"final_logit_softcapping\": 30.0, \"head_dim\": 256, "
    "\"hidden_act\": \"gelu_pytorch_tanh\", \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 2304, "
    "\"initializer_range\": 0.02, \"intermediate_size\": 9216, \"max_position_embeddings\": 8192, \"model_type\": "
    "\"gemma2\", \"num_attention_heads\": 8, \"num_hidden_layers\": 26, \"num_key_value_heads\": 4, \"pad_token_id\": 0, "
    "\"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, \"sliding_window\": 4096, "
    "\"torch_dtype\": \"float32\", \"use_cache\": true, \"vocab_size\": 256000}";

/* google/gemma-3-4b-it's text_config as a Gemma3ForCausalLM config.json (transformers 4 keys) ... */
static const char gemma3_hub[] =
    "{\"architectures\": [\"Gemma3ForCausalLM\"], \"attn_logit_softcapping\": null, \"final_logit_softcapping\": null, "
    "\"head_dim\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 2560, \"intermediate_size\": "
    "10240, \"max_position_embeddings\": 131072, \"model_type\": \"gemma3_text\", \"num_attention_heads\": 8, "
    "\"num_hidden_layers\": 8, \"num_key_value_heads\": 4, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, "
    "\"rope_local_base_freq\": 10000.0, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, "
    "\"rope_theta\": 1000000.0, \"sliding_window\": 1024, \"sliding_window_pattern\": 6, \"vocab_size\": 262208}";

/* ... and as transformers 5 writes the same model (8 layers here, to keep the list short) */
static const char gemma3_v5[] =
    "{\"architectures\": [\"Gemma3ForCausalLM\"], \"attn_logit_softcapping\": null, \"final_logit_softcapping\": null, "
    "\"head_dim\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 2560, \"intermediate_size\": "
    "10240, \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\", "
    "\"sliding_attention\", \"sliding_attention\", \"full_attention\", \"sliding_attention\", \"sliding_attention\"], "
    "\"max_position_embeddings\": 131072, \"model_type\": \"gemma3_text\", \"num_attention_heads\": 8, "
    "\"num_hidden_layers\": 8, \"num_key_value_heads\": 4, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, "
    "\"rope_parameters\": {\"full_attention\": {\"factor\": 8.0, \"rope_theta\": 1000000.0, \"rope_type\": "
    "\"linear\"}, \"sliding_attention\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}, \"sliding_window\": "
    "1024, \"tie_word_embeddings\": true, \"vocab_size\": 262208}";

static void parse(qlt_model_config *mc, const char *text) {
    cr_assert_eq(qlt_model_config_parse(mc, text, "config.json"), 0, "%s", qlt_error());
}

/* Gemma 2's hub file: every other layer slides from layer 0 (transformers' default layer_types), both soft-caps,
 * one RoPE, tied embeddings by default, the attention scale 256 ** -0.5. */
Test(gemma_model, gemma2_hub_config) {
    qlt_model_config mc;
    parse(&mc, gemma2_hub);
    cr_expect_eq(mc.arch, QLT_ARCH_GEMMA2);
    cr_expect(mc.gemma);
    cr_expect_eq(mc.sliding_window, 4096);
    for (int l = 0; l < 26; l++)
        cr_expect_eq(mc.layer_sliding[l], l % 2 == 0, "layer %d sliding %d", l, mc.layer_sliding[l]);
    cr_expect_eq(qlt_model_layer_window(&mc, 0), 4096);
    cr_expect_eq(qlt_model_layer_window(&mc, 1), 0);
    cr_expect_eq(mc.attn_softcap, 50.0f);
    cr_expect_eq(mc.final_softcap, 30.0f);
    cr_expect_eq(mc.tie_word_embeddings, 1);
    cr_expect_eq(mc.qk_norm, 0);
    cr_expect_eq(mc.head_dim, 256);
    cr_expect_eq(qlt_model_attn_scale(&mc), 0.0625f);
    cr_expect_eq(mc.rope_local_theta, 10000.0);
    cr_expect_eq(mc.rope_theta, 10000.0);
}

/* Gemma 3 in both spellings: the same layer kinds (layer 5 full), the same two RoPEs (sliding: base 1e4;
 * full: base 1e6 divided by 8), q/k norms, no soft-caps. */
Test(gemma_model, gemma3_config_spellings_agree) {
    qlt_model_config hub, v5;
    parse(&hub, gemma3_hub);
    parse(&v5, gemma3_v5);
    cr_expect_eq(hub.arch, QLT_ARCH_GEMMA3);
    cr_expect_eq(hub.qk_norm, 1);
    cr_expect_eq(hub.attn_softcap, 0.0f);
    cr_expect_eq(hub.final_softcap, 0.0f);
    cr_expect_eq(hub.tie_word_embeddings, 1);
    for (int l = 0; l < 8; l++) {
        cr_expect_eq(hub.layer_sliding[l], l != 5, "hub: layer %d", l);
        cr_expect_eq(v5.layer_sliding[l], hub.layer_sliding[l], "v5: layer %d", l);
        cr_expect_eq(qlt_model_layer_local_rope(&hub, l), l != 5);
    }
    float full[128], local[128], full5[128], local5[128];
    qlt_model_rope_inv_freq(&hub, full);
    qlt_model_rope_inv_freq_local(&hub, local);
    qlt_model_rope_inv_freq(&v5, full5);
    qlt_model_rope_inv_freq_local(&v5, local5);
    for (int i = 0; i < 128; i++) {
        float expo = (float)(2 * i) / 256.0f; /* transformers: arange(0, dim, 2).float() / dim */
        float want_full = (float)(1.0 / pow(1e6, (double)expo) / 8.0), want_local = (float)(1.0 / pow(1e4, (double)expo));
        cr_expect_eq(full[i], want_full, "full inv_freq[%d] %.9g vs %.9g", i, full[i], want_full);
        cr_expect_eq(local[i], want_local, "local inv_freq[%d] %.9g vs %.9g", i, local[i], want_local);
        cr_expect_eq(full5[i], full[i]);
        cr_expect_eq(local5[i], local[i]);
    }
    cr_expect_eq(v5.sliding_window, hub.sliding_window);
    cr_expect_eq(qlt_model_attn_scale(&v5), qlt_model_attn_scale(&hub));
}

/* transformers multiplies the embeddings by sqrt(hidden) cast to the model's dtype: 3072 -> 55.4256 in float32,
 * 55.5 in bf16. */
Test(gemma_model, embedding_scale_in_the_activation_dtype) {
    qlt_model_config mc = {.hidden = 3072, .gemma = 1};
    cr_expect_eq(qlt_gemma_embed_scale(&mc, QLT_DTYPE_F32), (float)sqrt(3072.0));
    cr_expect_eq(qlt_gemma_embed_scale(&mc, QLT_DTYPE_BF16), 55.5f);
}

static void expect_parse_error(const char *from, const char *to, const char *needle) {
    char *text = malloc(strlen(gemma2_hub) + strlen(to) + 1);
    const char *at = strstr(gemma2_hub, from);
    cr_assert(at, "%s", from);
    sprintf(text, "%.*s%s%s", (int)(at - gemma2_hub), gemma2_hub, to, at + strlen(from));
    qlt_model_config mc;
    qlt_error_clear();
    cr_expect_eq(qlt_model_config_parse(&mc, text, "config.json"), -1, "accepted: %s", to);
    cr_expect(strstr(qlt_error(), needle) && strstr(qlt_error(), "config.json"), "%s: %s", to, qlt_error());
    free(text);
}

Test(gemma_model, unsupported_values_are_one_line_errors) {
    expect_parse_error("\"hidden_activation\": \"gelu_pytorch_tanh\"", "\"hidden_activation\": \"gelu\"",
                       "hidden_activation 'gelu' is not supported");
    expect_parse_error("\"attn_logit_softcapping\": 50.0", "\"attn_logit_softcapping\": -1",
                       "'attn_logit_softcapping' must be a positive number or null");
    expect_parse_error("\"query_pre_attn_scalar\": 256", "\"query_pre_attn_scalar\": 0", "'query_pre_attn_scalar'");
    expect_parse_error("\"rope_theta\": 10000.0", "\"rope_scaling\": {\"rope_type\": \"llama3\"}",
                       "rope_type 'llama3' is not supported for Gemma");
    expect_parse_error("\"sliding_window\": 4096", "\"sliding_window\": 4096, \"layer_types\": [\"full_attention\"]",
                       "'layer_types' must be a list of num_hidden_layers (26)");
    expect_parse_error("\"cache_implementation\": \"hybrid\"", "\"use_bidirectional_attention\": true",
                       "use_bidirectional_attention");
    expect_parse_error("Gemma2ForCausalLM", "Gemma3ForConditionalGeneration", "the text model is");
}

/* A backend without Gemma's ops (the CUDA backend today) refuses a Gemma model naming the directory and what to
 * do, before it reads a weight: the directory here holds config.json only. */
Test(gemma_model, refused_before_loading_where_the_backend_lacks_its_ops) {
    char *tmp = test_tmpdir(), *src = test_fixture_path("tiny-gemma2", "config.json");
    char *dst = qlt_path_join(tmp, "config.json"), *text = NULL;
    cr_assert_eq(qlt_read_file(src, &text, NULL), 0);
    test_write_text(dst, text);
    qlt_backend *be = qlt_backend_cpu_create(0, 1);
    be->attention_softcap_fwd = NULL;
    qlt_model m;
    qlt_model_load_opts opts = {0};
    qlt_error_clear();
    cr_expect_eq(qlt_model_load(&m, be, tmp, &opts), -1);
    cr_expect(strstr(qlt_error(), tmp) && strstr(qlt_error(), "Gemma2ForCausalLM runs on the CPU backend only") &&
                  strstr(qlt_error(), "train.device: cpu"),
              "%s", qlt_error());
    be->destroy(be);
    qlt_remove_tree(tmp);
    free(tmp), free(src), free(dst), free(text);
}

/* `inspect` on each fixture explains the layer: norms, GeGLU, soft-caps, layer kinds and both RoPE bases. */
Test(gemma_model, inspect_explains_the_architecture) {
    static const struct {
        const char *fixture, *lines[5];
    } want[] = {
        {"tiny-gemma2",
         {"architecture: Gemma2ForCausalLM", "norms: RMSNorm x (1 + w), 4 a layer",
          "soft-caps: attention scores 0.5, final logits 1.5", "layer kinds: SF (S sliding window 6, F full)",
          "rope base: sliding layers 10000, full layers 10000"}},
        {"tiny-gemma3",
         {"architecture: Gemma3ForCausalLM", "q/k norm per head", "soft-caps: none",
          "layer kinds: SSF (S sliding window 5, F full)", "rope base: sliding layers 10000, full layers 1e+06 (linear x2)"}},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char *dir = test_fixture_path(want[i].fixture, NULL), *args = NULL, *out = NULL;
        if (asprintf(&args, "inspect %s", dir) < 0) abort();
        cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
        for (int j = 0; j < 5; j++)
            cr_expect(strstr(out, want[i].lines[j]), "%s: no '%s' in\n%s", want[i].fixture, want[i].lines[j], out);
        cr_expect(strstr(out, "mlp: GeGLU"), "%s", out);
        free(dir), free(args), free(out);
    }
}
