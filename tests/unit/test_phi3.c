/* test_phi3.c: what Phi-3 / Phi-4 (Phi3ForCausalLM) adds beside the goldens of test_golden.c: the NF4 cut of
 * a fused tensor, config.json in both spellings, the one adapter of a fused module (its targets, PEFT save and
 * load under qkv_proj / gate_up_proj), the refusal of a backend without rope_scaled, what inspect prints,
 * merge's refusal of GGUF and a bitsandbytes 4-bit Phi-3 checkpoint. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "config/config.h"
#include "cpu/backend_cpu.h"
#include "model/forward.h"
#include "model/longrope.h"
#include "model/lora.h"
#include "nf4/nf4.h"
#include "nf4/nf4_slice.h"
#include "test_util.h"
#include "train/batch.h"

/* A part cut anywhere on a block boundary dequantizes to the whole tensor's values there, bit for bit: one that
 * starts a nested block of 256 keeps the double quantization, one that does not holds float32 absmax. */
Test(phi3, nf4_slice_dequantizes_as_the_whole) {
    const int64_t numel = 64 * 700; /* 700 blocks of 64: nested blocks 0-255, 256-511, 512-699 */
    float *x = malloc(sizeof(float) * (size_t)numel), *whole_dq = malloc(sizeof(float) * (size_t)numel);
    uint64_t state = 12345;
    for (int64_t i = 0; i < numel; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ((float)(state >> 40) / 16777216.0f - 0.5f) * (1.0f + (float)(i % 977) / 50.0f);
    }
    qlt_nf4 whole;
    cr_assert_eq(qlt_nf4_alloc_host(&whole, numel, 64, 1), 0);
    qlt_nf4_quantize_f32(&whole, x);
    qlt_nf4_dequantize_f32(&whole, whole_dq);
    const int64_t cuts[4] = {0, 64 * 100, 64 * 512, numel}; /* [0, 100): nested; [100, 512): not; [512, 700): nested */
    for (int i = 0; i < 3; i++) {
        qlt_nf4 part;
        int64_t n = cuts[i + 1] - cuts[i];
        cr_assert_eq(qlt_nf4_slice(&whole, cuts[i], n, &part), 0, "%s", qlt_error());
        cr_expect_eq(part.double_quant, i != 1, "part %d double_quant %d", i, part.double_quant);
        float *got = malloc(sizeof(float) * (size_t)n);
        qlt_nf4_dequantize_f32(&part, got);
        cr_expect_eq(memcmp(got, whole_dq + cuts[i], sizeof(float) * (size_t)n), 0, "part %d differs", i);
        free(got);
        qlt_nf4_free_host(&part);
    }
    qlt_nf4 bad;
    cr_expect_neq(qlt_nf4_slice(&whole, 32, 64, &bad), 0, "a cut inside a block must be refused");
    cr_expect(strstr(qlt_error(), "blocks of 64"), "%s", qlt_error());
    qlt_nf4_free_host(&whole);
    free(x);
    free(whole_dq);
}

/* tiny-phi3 spells its config as transformers 5 (rope_parameters), tiny-phi3-short as the hub's checkpoints
 * (rope_scaling {"type": ...}, rope_theta and original_max_position_embeddings at the top level). */
Test(phi3, config_both_spellings) {
    qlt_model_config mc;
    char *dir = test_fixture_path("tiny-phi3", NULL);
    cr_assert_eq(qlt_model_config_load(&mc, dir), 0, "%s", qlt_error());
    cr_expect_eq(mc.arch, QLT_ARCH_PHI3);
    cr_expect_eq(mc.rope_type, QLT_ROPE_LONGROPE);
    cr_expect_eq(qlt_model_rotary_dim(&mc), 12); /* int(16 * 0.75) */
    cr_expect_eq(mc.rope_original_max_pos, 16);
    cr_expect_eq(mc.rope_attn_factor, (float)sqrt(1.0 + log(64.0 / 16.0) / log(16.0)));
    cr_expect_eq(mc.rope_long_factor[5], 15.0f);
    cr_expect_eq(mc.sliding_window, 10);
    cr_expect(qlt_longrope_is_long(&mc, 16) && !qlt_longrope_is_long(&mc, 15), "long from position 16 on");
    free(dir);
    dir = test_fixture_path("tiny-phi3-short", NULL);
    cr_assert_eq(qlt_model_config_load(&mc, dir), 0, "%s", qlt_error());
    cr_expect_eq(mc.rope_type, QLT_ROPE_LONGROPE);
    cr_expect_eq(qlt_model_rotary_dim(&mc), 16);
    cr_expect_eq(mc.rope_original_max_pos, 32);
    cr_expect_eq(mc.rope_attn_factor, (float)sqrt(1.0 + log(128.0 / 32.0) / log(32.0)));
    cr_expect_eq(mc.rope_short_factor[7], 6.0f);
    cr_expect_eq(mc.sliding_window, 0); /* null */
    free(dir);
    /* Phi-3-mini-128k's older "su" and an explicit attention_factor; no sliding_window key: none */
    const char *su = "{\"architectures\": [\"Phi3ForCausalLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 1, "
                     "\"num_attention_heads\": 4, \"intermediate_size\": 96, \"vocab_size\": 100, "
                     "\"max_position_embeddings\": 131072, \"original_max_position_embeddings\": 4096, "
                     "\"rope_scaling\": {\"type\": \"su\", \"attention_factor\": 1.5, \"short_factor\": [1, 1, 1, 1, 1, "
                     "1, 1, 1], \"long_factor\": [2, 2, 2, 2, 2, 2, 2, 2]}}";
    cr_assert_eq(qlt_model_config_parse(&mc, su, "su.json"), 0, "%s", qlt_error());
    cr_expect_eq(mc.rope_type, QLT_ROPE_LONGROPE);
    cr_expect_eq(mc.rope_attn_factor, 1.5f);
    cr_expect_eq(mc.sliding_window, 0);
    float inv[8];
    qlt_longrope_inv_freq(&mc, 1, inv);
    cr_expect_eq(inv[0], 0.5f); /* 1 / (2 * 10000 ** 0) */
}

/* lora.targets naming part of a fused module is refused in one line naming the module. */
Test(phi3, targets_name_a_whole_fused_module) {
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    qlt_model m;
    qlt_model_load_opts opts = {0};
    char *dir = test_fixture_path("tiny-phi3", NULL);
    cr_assert_eq(qlt_model_load(&m, be, dir, &opts), 0, "%s", qlt_error());
    qlt_lora lora;
    cr_expect_neq(qlt_lora_create(&lora, &m, 4, 8, QLT_TARGET_Q | QLT_TARGET_V, 0, 0), 0);
    cr_expect(strstr(qlt_error(), "q_proj but not all of its module") && strstr(qlt_error(), "qkv_proj"), "%s",
              qlt_error());
    cr_expect_neq(qlt_lora_create(&lora, &m, 4, 8, QLT_TARGET_UP, 0, 0), 0);
    cr_expect(strstr(qlt_error(), "gate_up_proj"), "%s", qlt_error());
    unsigned bits;
    cr_assert_eq(qlt_config_target_bits("qkv_proj", &bits), 0);
    cr_assert_eq(qlt_lora_create(&lora, &m, 4, 8, bits, 0, 0), 0, "%s", qlt_error());
    cr_expect_eq(lora.n_params, 2 * 4 * (64 + 128)); /* one A [4, 64] and one B [128, 4] a layer */
    cr_expect_eq(lora.slots[0][QLT_PROJ_K].offset_a, lora.slots[0][QLT_PROJ_Q].offset_a);
    cr_expect_eq(lora.slots[0][QLT_PROJ_V].offset_b, lora.slots[0][QLT_PROJ_Q].offset_b + 4 * (64 + 32));
    qlt_lora_free(&lora);
    qlt_model_free(&m);
    be->destroy(be);
    free(dir);
}

/* adapter-init (PEFT's own files) loads, saves under the same names and shapes with the same values, and
 * target_modules lists the fused modules as PEFT does. */
Test(phi3, peft_save_load_fused_modules) {
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    qlt_model m;
    qlt_model_load_opts opts = {0};
    char *dir = test_fixture_path("tiny-phi3", NULL), *adir = test_fixture_path("tiny-phi3", "adapter-init");
    cr_assert_eq(qlt_model_load(&m, be, dir, &opts), 0, "%s", qlt_error());
    int r, rs;
    float alpha, dropout;
    unsigned targets;
    cr_assert_eq(qlt_lora_read_peft_config(adir, &r, &alpha, &targets, &rs, &dropout), 0, "%s", qlt_error());
    cr_expect_eq(targets, (unsigned)QLT_TARGET_ALL);
    qlt_lora lora;
    cr_assert_eq(qlt_lora_create(&lora, &m, r, alpha, targets, rs, dropout), 0, "%s", qlt_error());
    cr_assert_eq(qlt_lora_load_peft(&lora, adir), 0, "%s", qlt_error());
    char *tmp = test_tmpdir();
    cr_assert_eq(qlt_lora_save_peft(&lora, &m.cfg, NULL, tmp), 0, "%s", qlt_error());
    char *orig_path = qlt_path_join(adir, "adapter_model.safetensors"), *mine_path = qlt_path_join(tmp, "adapter_model.safetensors");
    qlt_st_file orig, mine;
    cr_assert_eq(qlt_st_open(&orig, orig_path), 0);
    cr_assert_eq(qlt_st_open(&mine, mine_path), 0);
    cr_expect_eq(mine.n_tensors, orig.n_tensors);
    cr_expect_eq(orig.n_tensors, 16); /* 2 layers x (qkv_proj, o_proj, gate_up_proj, down_proj) x (A, B) */
    for (int i = 0; i < orig.n_tensors; i++) {
        const qlt_st_tensor *o = &orig.tensors[i], *t = qlt_st_find(&mine, o->name);
        cr_assert(t, "saved adapter lacks %s", o->name);
        cr_expect(t->ndim == 2 && t->shape[0] == o->shape[0] && t->shape[1] == o->shape[1], "%s: shape", o->name);
        float *a = test_read_f32(&orig, o->name, NULL), *b = test_read_f32(&mine, o->name, NULL);
        cr_expect_eq(memcmp(a, b, sizeof(float) * (size_t)o->numel), 0, "%s: values", o->name);
        free(a);
        free(b);
    }
    cr_expect(qlt_st_find(&mine, "base_model.model.model.layers.1.self_attn.qkv_proj.lora_B.weight")->shape[0] == 128);
    char *cfg_path = qlt_path_join(tmp, "adapter_config.json"), *text;
    cr_assert_eq(qlt_read_file(cfg_path, &text, NULL), 0);
    cr_expect(strstr(text, "\"qkv_proj\"") && strstr(text, "\"gate_up_proj\"") && !strstr(text, "\"q_proj\"") &&
                  !strstr(text, "\"up_proj\""), "%s", text);
    /* and it loads back */
    qlt_lora again;
    cr_assert_eq(qlt_lora_create(&again, &m, r, alpha, targets, rs, dropout), 0, "%s", qlt_error());
    cr_assert_eq(qlt_lora_load_peft(&again, tmp), 0, "%s", qlt_error());
    cr_expect_eq(memcmp(again.params, lora.params, sizeof(float) * (size_t)lora.n_params), 0);
    qlt_lora_free(&again);
    free(text);
    free(cfg_path);
    qlt_st_close(&orig);
    qlt_st_close(&mine);
    free(orig_path);
    free(mine_path);
    qlt_remove_tree(tmp);
    free(tmp);
    qlt_lora_free(&lora);
    qlt_model_free(&m);
    be->destroy(be);
    free(dir);
    free(adir);
}

/* A backend without rope_scaled (CUDA today) refuses Phi-3 before reading a weight, in one message. */
Test(phi3, backend_without_rope_scaled_refuses) {
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    be->rope_scaled = NULL;
    qlt_model m;
    qlt_model_load_opts opts = {0};
    char *dir = test_fixture_path("tiny-phi3", NULL);
    cr_expect_neq(qlt_model_load(&m, be, dir, &opts), 0);
    cr_expect(strstr(qlt_error(), "Phi3ForCausalLM's rotary embedding (12 of 16 dims rotate, attention factor 1.22") &&
                  strstr(qlt_error(), "runs on the CPU only"), "%s", qlt_error());
    qlt_model_config mc;
    cr_assert_eq(qlt_model_config_load(&mc, dir), 0);
    cr_expect_neq(qlt_model_init_random(&m, be, &mc, 1, &opts), 0);
    be->destroy(be);
    free(dir);
}

Test(phi3, inspect_explains_the_architecture) {
    char *dir = test_fixture_path("tiny-phi3", NULL), *args, *out;
    cr_assert(asprintf(&args, "inspect %s", dir) > 0);
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "architecture: Phi3ForCausalLM"), "%s", out);
    cr_expect(strstr(out, "rotary: LongRoPE: short factors while a batch's positions stay below 16"), "%s", out);
    cr_expect(strstr(out, "partial rotary: the first 12 of 16 dims"), "%s", out);
    cr_expect(strstr(out, "fused: qkv_proj [q 64 | k 32 | v 32 rows] and gate_up_proj [gate 128 | up 128 rows]"), "%s",
              out);
    cr_expect(strstr(out, "attention: sliding window 10 on every layer"), "%s", out);
    free(out);
    free(args);
    free(dir);
}

Test(phi3, merge_refuses_gguf) {
    char *tmp = test_tmpdir(), *dir = test_fixture_path("tiny-phi3", NULL), *adir = test_fixture_path("tiny-phi3", "adapter-init");
    char *cfg = qlt_path_join(tmp, "run.yaml"), *text, *args, *out;
    cr_assert(asprintf(&text, "model: {path: %s, quant: none}\n", dir) > 0);
    test_write_text(cfg, text);
    cr_assert(asprintf(&args, "merge --config %s --adapter %s --out %s/m.gguf --format gguf --dtype f32", cfg, adir,
                       tmp) > 0);
    cr_expect_neq(test_run_cli(NULL, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "qlora-train: error: merge --format gguf: Phi3ForCausalLM's fused qkv_proj") &&
                  strchr(out, '\n') == out + strlen(out) - 1, "%s", out);
    free(out);
    free(args);
    free(text);
    free(cfg);
    qlt_remove_tree(tmp);
    free(tmp);
    free(dir);
    free(adir);
}

/* Logits [n, vocab] of a model directory on the CPU's reference mode for tiny-phi3's golden batch (heap). */
static float *phi3_logits(const char *dir, int nf4, int64_t *numel) {
    qlt_backend *be = qlt_backend_cpu_create(1, 1);
    qlt_model m;
    qlt_model_load_opts opts = {.nf4 = nf4, .nf4_blocksize = 64, .double_quant = 1};
    cr_assert_eq(qlt_model_load(&m, be, dir, &opts), 0, "%s", qlt_error());
    int32_t *ids, *labels;
    int batch, seq;
    test_golden_batch("tiny-phi3", &ids, &labels, &batch, &seq);
    qlt_batch_buffers bb;
    cr_assert_eq(qlt_batch_buffers_init(&bb, be, batch, seq, m.cfg.sliding_window), 0);
    qlt_batch_upload(&bb, be, ids, labels, NULL);
    qlt_graph g;
    qlt_graph_init(&g, be, 1);
    qlt_forward_opts o = {0};
    int hf = 0;
    for (int pass = 0; pass < 2; pass++) {
        qlt_graph_begin(&g, pass == 0);
        hf = qlt_forward(&g, &m, &bb.dev, &o);
        if (pass == 0) cr_assert_eq(qlt_graph_commit_plan(&g), 0);
    }
    *numel = (int64_t)batch * seq * m.cfg.vocab;
    float *logits = malloc(sizeof(float) * (size_t)*numel);
    be->logits(be, logits, g.values[hf].data, &m.lm_head, (int64_t)batch * seq);
    qlt_graph_free(&g);
    qlt_batch_buffers_free(&bb, be);
    qlt_model_free(&m);
    be->destroy(be);
    free(ids);
    free(labels);
    return logits;
}

/* `quantize` writes qkv_proj / gate_up_proj as bitsandbytes modules quantized whole; loading that checkpoint
 * cuts them as it cuts a dense model quantized on load: the same logits, bit for bit. */
Test(phi3, bitsandbytes_checkpoint_is_cut_like_nf4_on_load) {
    char *tmp = test_tmpdir(), *dir = test_fixture_path("tiny-phi3", NULL), *out = qlt_path_join(tmp, "bnb"), *args, *log;
    cr_assert(asprintf(&args, "quantize %s %s", dir, out) > 0);
    cr_assert_eq(test_run_cli(NULL, args, &log), 0, "%s", log);
    int64_t n1, n2, n3;
    float *on_load = phi3_logits(dir, 1, &n1), *from_bnb = phi3_logits(out, 0, &n2), *dense = phi3_logits(dir, 0, &n3);
    cr_assert_eq(n1, n2);
    cr_expect_eq(memcmp(on_load, from_bnb, sizeof(float) * (size_t)n1), 0, "bnb checkpoint logits differ");
    cr_expect_gt(test_rel_err(on_load, dense, n1), 1e-4, "NF4 should move the logits off the dense ones");
    free(on_load);
    free(from_bnb);
    free(dense);
    free(log);
    free(args);
    qlt_remove_tree(tmp);
    free(tmp);
    free(out);
    free(dir);
}
