/* test_model.c: model-level numbers that must equal transformers' exactly (the attention scale), the
 * loader's handling of tied embeddings, and config.json's quantization_config checked in one place. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "cpu/backend_cpu.h"
#include "formats/bnb_checkpoint.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "model/model_config.h"
#include "test_util.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* transformers: scaling = head_dim ** -0.5 (a Python double), float32 in the kernel. Expected bits are
 * numpy.float32(hd ** -0.5); 96 and 112 are where 1.0f / sqrtf(hd) lands 1 ulp away. */
Test(model, attention_scale_is_head_dim_pow_minus_half) {
    static const struct { int hd; uint32_t bits; } want[] = {
        {64, 0x3e000000}, {96, 0x3dd105ec}, {112, 0x3dc1848f}, {128, 0x3db504f3}, {6, 0x3ed105ec},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        qlt_model_config mc = {.head_dim = want[i].hd};
        float s = qlt_model_attn_scale(&mc);
        cr_expect_eq(bits_of(s), want[i].bits, "head_dim %d: scale %a (0x%08x), want 0x%08x", want[i].hd, s,
                     bits_of(s), want[i].bits);
    }
}

/* tie_word_embeddings true and a checkpoint that also stores a (different) lm_head.weight: transformers
 * ties lm_head to embed_tokens, so the embedding's values are the logits' weights. */
Test(model, tied_lm_head_ignores_a_stored_lm_head) {
    char *dir = test_tmpdir();
    char *src = test_fixture_path("tiny-qwen2", "model.safetensors"), *dst = qlt_path_join(dir, "model.safetensors");
    char *cfg_src = test_fixture_path("tiny-qwen2", "config.json"), *cfg_dst = qlt_path_join(dir, "config.json");
    char *text = NULL;
    cr_assert_eq(qlt_read_file(cfg_src, &text, NULL), 0);
    cr_assert(strstr(text, "\"tie_word_embeddings\": true"), "the fixture is a tied model");
    test_write_text(cfg_dst, text);
    free(text);
    qlt_st_file f;
    cr_assert_eq(qlt_st_open(&f, src), 0, "%s", qlt_error());
    cr_assert_null(qlt_st_find(&f, "lm_head.weight"));
    const qlt_st_tensor *emb = qlt_st_find(&f, "model.embed_tokens.weight");
    cr_assert(emb && emb->dtype == QLT_DTYPE_F32);
    qlt_st_writer w;
    qlt_st_writer_init(&w);
    for (int i = 0; i < f.n_tensors; i++) {
        const qlt_st_tensor *t = &f.tensors[i];
        qlt_st_writer_add(&w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    float *other = malloc(emb->nbytes); /* lm_head.weight [vocab, hidden] = 2 * embedding + 1 */
    for (int64_t i = 0; i < emb->numel; i++) other[i] = 2.0f * ((const float *)emb->data)[i] + 1.0f;
    qlt_st_writer_add(&w, "lm_head.weight", QLT_DTYPE_F32, 2, emb->shape, other);
    cr_assert_eq(qlt_st_writer_write(&w, dst), 0, "%s", qlt_error());
    qlt_st_writer_free(&w);

    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    qlt_model m;
    cr_assert_eq(qlt_model_load(&m, be, dir, NULL), 0, "%s", qlt_error());
    cr_expect(m.lm_head_shared);
    int64_t vocab = m.cfg.vocab, hidden = m.cfg.hidden;
    float *x = calloc((size_t)hidden, sizeof(float)), *logits = malloc(sizeof(float) * (size_t)vocab);
    x[0] = 1.0f; /* logits = column 0 of the lm_head weight */
    be->logits(be, logits, x, &m.lm_head, 1);
    int64_t wrong = 0;
    for (int64_t v = 0; v < vocab; v++) wrong += logits[v] != ((const float *)emb->data)[v * hidden];
    cr_expect_eq(wrong, 0, "%lld of %lld logits come from the stored lm_head.weight, not the embedding",
                 (long long)wrong, (long long)vocab);
    qlt_model_free(&m);
    be->destroy(be);
    qlt_st_close(&f);
    free(x);
    free(logits);
    free(other);
    qlt_remove_tree(dir);
    free(dir);
    free(src);
    free(dst);
    free(cfg_src);
    free(cfg_dst);
}

/* config.json's quantization_config has one validator (qlt_bnb_check_config): parsing the model config
 * and detecting the checkpoint accept and refuse the same things with the same words. */
Test(model, quantization_config_has_one_validator) {
    static const char *const cases[] = {
        "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"fp4\"}",
        "{\"quant_method\": \"bitsandbytes\", \"load_in_8bit\": true}",
        "{\"quant_method\": \"gptq\"}",
        "{\"quant_method\": \"bitsandbytes\", \"_load_in_4bit\": true}",
        "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"bnb_4bit_quant_storage\": \"bfloat16\"}",
        "null",
    };
    char *dir = test_tmpdir(), *path = qlt_path_join(dir, "config.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[1024], parse_err[1024];
        snprintf(json, sizeof json,
                 "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 1,"
                 "\"num_attention_heads\": 4, \"intermediate_size\": 64, \"vocab_size\": 32,"
                 "\"quantization_config\": %s}", cases[i]);
        test_write_text(path, json);
        qlt_model_config mc;
        int parsed = qlt_model_config_load(&mc, dir);
        snprintf(parse_err, sizeof parse_err, "%s", parsed ? qlt_error() : "");
        qlt_bnb_config bc;
        int detected = qlt_bnb_detect(dir, &bc);
        cr_expect_eq(parsed == 0, detected >= 0, "case %zu: config parse %d, bnb detect %d", i, parsed, detected);
        if (parsed != 0 && detected < 0)
            cr_expect_str_eq(parse_err, qlt_error(), "case %zu: two messages for one problem", i);
    }
    qlt_remove_tree(dir);
    free(path);
    free(dir);
}

/* Which layers slide, as transformers 5 decides it (MistralConfig, Qwen2Config.__post_init__): Mistral every
 * layer (sliding_window defaults to 4096 when absent, none when null); Qwen2 only with use_sliding_window,
 * then layer_types when given, else the layers from max_window_layers on; Llama never. */
static void parse_window(const char *arch, const char *extra, qlt_model_config *mc) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"architectures\": [\"%s\"], \"hidden_size\": 64, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, "
             "\"intermediate_size\": 128, \"vocab_size\": 100%s%s}",
             arch, extra[0] ? ", " : "", extra);
    cr_assert_eq(qlt_model_config_parse(mc, text, "config.json"), 0, "%s: %s", extra, qlt_error());
}

Test(model, sliding_window_layers_follow_transformers) {
    static const struct {
        const char *arch, *extra;
        int window;
        const char *layers; /* which of the 4 layers slide */
    } cases[] = {
        {"MistralForCausalLM", "\"sliding_window\": 8", 8, "1111"},
        {"MistralForCausalLM", "", 4096, "1111"},
        {"MistralForCausalLM", "\"sliding_window\": null", 0, "0000"},
        {"MistralForCausalLM", "\"sliding_window\": 8, \"layer_types\": [\"full_attention\"]", 8, "1111"},
        {"Qwen2ForCausalLM", "\"sliding_window\": 8", 0, "0000"},
        {"Qwen2ForCausalLM", "\"sliding_window\": 8, \"use_sliding_window\": true, \"max_window_layers\": 2", 8, "0011"},
        {"Qwen2ForCausalLM", "\"use_sliding_window\": true, \"max_window_layers\": 3", 4096, "0001"},
        {"Qwen2ForCausalLM", "\"sliding_window\": 8, \"use_sliding_window\": true", 8, "0000"},
        {"Qwen3ForCausalLM",
         "\"sliding_window\": 8, \"use_sliding_window\": true, \"max_window_layers\": 0, \"layer_types\": "
         "[\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\"]",
         8, "1010"},
        {"Qwen2ForCausalLM", "\"sliding_window\": null, \"use_sliding_window\": true", 0, "0000"},
        {"LlamaForCausalLM", "\"sliding_window\": 8", 0, "0000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qlt_model_config mc;
        parse_window(cases[i].arch, cases[i].extra, &mc);
        cr_expect_eq(mc.sliding_window, cases[i].window, "%s {%s}: window %d, want %d", cases[i].arch, cases[i].extra,
                     mc.sliding_window, cases[i].window);
        for (int l = 0; l < 4; l++)
            cr_expect_eq(qlt_model_layer_window(&mc, l) != 0, cases[i].layers[l] == '1', "%s {%s}: layer %d",
                         cases[i].arch, cases[i].extra, l);
    }
    qlt_model_config mc;
    parse_window("MistralForCausalLM", "\"sliding_window\": 8", &mc);
    cr_expect(qlt_model_window_matters(&mc, 9) && !qlt_model_window_matters(&mc, 8));
    char line[160];
    qlt_model_describe_attention(&mc, line, sizeof line);
    cr_expect_str_eq(line, "sliding window 8 on every layer");
    parse_window("Qwen2ForCausalLM", "\"use_sliding_window\": true, \"sliding_window\": 8", &mc); /* layers 28.. */
    cr_expect(!qlt_model_window_matters(&mc, 100));
    qlt_model_describe_attention(&mc, line, sizeof line);
    cr_expect_str_eq(line, "full causal");
    parse_window("Qwen2ForCausalLM", "\"use_sliding_window\": true, \"sliding_window\": 8, \"max_window_layers\": 1",
                 &mc);
    qlt_model_describe_attention(&mc, line, sizeof line);
    cr_expect_str_eq(line, "sliding window 8 on layers 1-3 (full causal on layer 0)");
    parse_window("Qwen2ForCausalLM", "\"use_sliding_window\": true, \"max_window_layers\": 3", &mc);
    qlt_model_describe_attention(&mc, line, sizeof line);
    cr_expect_str_eq(line, "sliding window 4096 on layer 3 (full causal on layers 0-2)");
    parse_window("Qwen3ForCausalLM", "\"use_sliding_window\": true, \"sliding_window\": 8, \"layer_types\": "
                 "[\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\"]", &mc);
    qlt_model_describe_attention(&mc, line, sizeof line);
    cr_expect_str_eq(line, "sliding window 8 on 2 of 4 layers (full causal on the others)");
}
