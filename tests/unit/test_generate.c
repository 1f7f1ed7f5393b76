/* test_generate.c: generation (src/infer): the KV-cache decoder reproduces Hugging Face's float64 logits of the
 * golden fixtures token by token (prompt chunks and single steps, with the initial adapter), and the training
 * forward's logits on an NF4 base; the sampler follows Hugging Face's processors (repetition penalty, greedy,
 * temperature, top-k, top-p) and its draws follow the distribution; the CLI generates and rejects bad options
 * with one line. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"
#include "common/error.h"
#include "cpu/backend_cpu.h"
#include "infer/kv_decoder.h"
#include "infer/sample.h"
#include "model/forward.h"
#include "model/lora.h"
#include "test_util.h"
#include "train/batch.h"

typedef struct gen_model {
    qlt_backend *be;
    qlt_model model;
    qlt_lora lora;
} gen_model;

static void gen_model_open(gen_model *g, const char *name, int nf4) {
    memset(g, 0, sizeof *g);
    g->be = qlt_backend_cpu_create(0, 1);
    char *dir = test_fixture_path(name, NULL), *adir = test_fixture_path(name, "adapter-init");
    qlt_model_load_opts opts = {.nf4 = nf4, .nf4_blocksize = 64, .double_quant = 1};
    cr_assert_eq(qlt_model_load(&g->model, g->be, dir, &opts), 0, "%s", qlt_error());
    int r, rs;
    float alpha, dropout;
    unsigned targets;
    cr_assert_eq(qlt_lora_read_peft_config(adir, &r, &alpha, &targets, &rs, &dropout), 0, "%s", qlt_error());
    cr_assert_eq(qlt_lora_create(&g->lora, &g->model, r, alpha, targets, rs, 0.0f), 0, "%s", qlt_error());
    cr_assert_eq(qlt_lora_load_peft(&g->lora, adir), 0, "%s", qlt_error());
    free(dir);
    free(adir);
}

static void gen_model_close(gen_model *g) {
    qlt_lora_free(&g->lora);
    qlt_model_free(&g->model);
    g->be->destroy(g->be);
}

/* Row b of the golden batch decoded as a prompt of `prefill` tokens (logits of each) and then one token a step;
 * logits [seq, vocab] of every position. */
static float *decode_row(gen_model *g, const int32_t *row, int seq, int prefill, int64_t chunk) {
    const int32_t vocab = g->model.cfg.vocab;
    float *out = malloc(sizeof(float) * (size_t)seq * (size_t)vocab);
    qlt_kv_decoder d;
    cr_assert_eq(qlt_kv_decoder_init(&d, &g->model, &g->lora, seq, chunk), 0, "%s", qlt_error());
    cr_assert_eq(qlt_kv_decoder_step(&d, row, prefill, NULL, out), 0, "%s", qlt_error());
    for (int t = prefill; t < seq; t++)
        cr_assert_eq(qlt_kv_decoder_step(&d, row + t, 1, out + (size_t)t * (size_t)vocab, NULL), 0, "%s", qlt_error());
    cr_assert_eq(d.past, seq);
    qlt_kv_decoder_free(&d);
    return out;
}

/* a fixture name by value: Criterion copies parameters into the test's process, where pointers may not hold */
typedef struct fixture_name {
    char name[32];
} fixture_name;

ParameterizedTestParameters(generate, decode_matches_golden) {
    static fixture_name names[] = {{"tiny-llama"},     {"tiny-qwen2"},  {"tiny-qwen3"}, {"tiny-mistral"},
                                   {"tiny-qwen2-swa"}, {"tiny-gemma2"}, {"tiny-gemma3"}, {"tiny-phi3-short"}};
    return cr_make_param_array(fixture_name, names, sizeof names / sizeof names[0]);
}

/* The goldens' lora_logits [batch, seq, vocab] are HF + PEFT in float64 on whole rows; the decoder sees each row
 * as a prompt of 3 tokens (in chunks of 2, so the cache is written by two prompt calls) and then one token a step
 * (tiny-mistral: past its sliding window of 6 the cache holds keys the queries must not see; tiny-phi3-short:
 * fused projections, LongRoPE's short factors and attention factor. tiny-phi3 is left out: its golden rows take
 * the long factors for every position, as transformers does for a 24-token forward, while decoding, as
 * transformers' generate, takes the short ones until the positions pass original_max_position_embeddings).
 * Same tolerance as the training forward's golden test: 1e-5 of the logits' largest magnitude. */
ParameterizedTest(fixture_name *fixture, generate, decode_matches_golden) {
    const char *const *name = (const char *const[]){fixture->name};
    gen_model g;
    gen_model_open(&g, *name, 0);
    int32_t *ids;
    int batch, seq;
    test_golden_batch(*name, &ids, NULL, &batch, &seq);
    char *gpath = test_fixture_path(*name, "golden.safetensors");
    qlt_st_file golden;
    cr_assert_eq(qlt_st_open(&golden, gpath), 0, "%s", qlt_error());
    int64_t numel;
    float *ref = test_read_f32(&golden, "lora_logits", &numel);
    const int32_t vocab = g.model.cfg.vocab;
    cr_assert_eq(numel, (int64_t)batch * seq * vocab);
    for (int b = 0; b < batch; b++) {
        float *got = decode_row(&g, ids + (size_t)b * seq, seq, 3, 2);
        double err = test_rel_err(got, ref + (size_t)b * seq * vocab, (int64_t)seq * vocab);
        cr_expect(err <= 1e-5, "%s row %d: decoded logits max rel err %.3g > 1e-5", *name, b, err);
        free(got);
    }
    free(ref);
    free(ids);
    free(gpath);
    qlt_st_close(&golden);
    gen_model_close(&g);
}

/* On an NF4 base the reference is the training forward on the tape (no golden for NF4): the same weights and
 * ops, so the decoder must agree to float32 rounding of the attention sums (1e-5 of the largest logit). */
Test(generate, decode_matches_forward_on_nf4) {
    gen_model g;
    gen_model_open(&g, "tiny-qwen3", 1);
    int32_t *ids, *labels;
    int batch, seq;
    test_golden_batch("tiny-qwen3", &ids, &labels, &batch, &seq);
    qlt_batch_buffers bb;
    cr_assert_eq(qlt_batch_buffers_init(&bb, g.be, 1, seq, g.model.cfg.sliding_window), 0);
    qlt_batch_upload(&bb, g.be, ids, labels, NULL);
    qlt_optim_scalars *scalars = g.be->alloc(g.be, sizeof *scalars);
    memset(scalars, 0, sizeof *scalars);
    scalars->grad_scale = 1.0f;
    void *scratch = g.be->alloc(g.be, qlt_loss_scratch_bytes(&g.model, seq));
    qlt_graph graph;
    qlt_graph_init(&graph, g.be, 1);
    qlt_forward_opts o = {.lora = &g.lora, .scalars = scalars, .loss_scratch = scratch};
    int hf = -1;
    for (int pass = 0; pass < 2; pass++) {
        qlt_graph_begin(&graph, pass == 0);
        hf = qlt_forward(&graph, &g.model, &bb.dev, &o);
        if (pass == 0) cr_assert_eq(qlt_graph_commit_plan(&graph), 0);
    }
    const int32_t vocab = g.model.cfg.vocab;
    float *ref = malloc(sizeof(float) * (size_t)seq * (size_t)vocab);
    g.be->logits(g.be, ref, graph.values[hf].data, &g.model.lm_head, seq);
    float *got = decode_row(&g, ids, seq, 5, 64);
    double err = test_rel_err(got, ref, (int64_t)seq * vocab);
    cr_expect(err <= 1e-5, "decoded logits vs the forward on NF4: max rel err %.3g > 1e-5", err);
    free(got);
    free(ref);
    qlt_graph_free(&graph);
    g.be->free(g.be, scratch);
    g.be->free(g.be, scalars);
    qlt_batch_buffers_free(&bb, g.be);
    free(ids);
    free(labels);
    gen_model_close(&g);
}

Test(generate, decoder_refuses_overflow_and_bad_ids) {
    gen_model g;
    gen_model_open(&g, "tiny-llama", 0);
    qlt_kv_decoder d;
    cr_assert_eq(qlt_kv_decoder_init(&d, &g.model, NULL, 4, 4), 0, "%s", qlt_error());
    int32_t ids[5] = {1, 2, 3, 4, 5};
    cr_expect_neq(qlt_kv_decoder_step(&d, ids, 5, NULL, NULL), 0);
    cr_expect(strstr(qlt_error(), "exceed the KV cache"), "%s", qlt_error());
    int32_t bad = g.model.cfg.vocab;
    cr_expect_neq(qlt_kv_decoder_step(&d, &bad, 1, NULL, NULL), 0);
    cr_expect(strstr(qlt_error(), "outside the model's vocabulary"), "%s", qlt_error());
    cr_expect_eq(d.past, 0, "a refused step leaves the cache as it was");
    qlt_kv_decoder_free(&d);
    gen_model_close(&g);
}

/* A backend other than the CPU one (here the CPU backend under another name, standing for CUDA, whose decode
 * kernel has no window) refuses a sliding window shorter than the cache in one line naming the CPU path, and
 * takes the model when the window covers the whole cache. */
Test(generate, decoder_refuses_a_window_off_the_cpu) {
    gen_model g;
    gen_model_open(&g, "tiny-mistral", 0);
    const char *name = g.be->name;
    g.be->name = "cuda";
    qlt_kv_decoder d;
    cr_expect_neq(qlt_kv_decoder_init(&d, &g.model, NULL, 24, 4), 0);
    cr_expect(strstr(qlt_error(), "sliding_window 6") && strstr(qlt_error(), "train.device: cpu"), "%s", qlt_error());
    cr_assert_eq(qlt_kv_decoder_init(&d, &g.model, NULL, 6, 4), 0, "%s", qlt_error());
    qlt_kv_decoder_free(&d);
    g.be->name = name;
    gen_model_close(&g);
}

static char scratch_buf[1 << 16];

Test(sample, greedy_penalty_and_filters) {
    float logits[6] = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f, 2.9f};
    qlt_rng rng;
    qlt_rng_seed(&rng, 1);
    qlt_sample_opts greedy = {0.0f, 0, 1.0f, 1.0f};
    /* ties go to the lowest id, as torch.argmax */
    cr_expect_eq(qlt_sample_next(&greedy, logits, 6, NULL, 0, &rng, scratch_buf), 1);
    /* repetition penalty 2 on ids 1, 2 and 3: 3 -> 1.5, 3 -> 1.5, -2 -> -4 (negative logits are multiplied) */
    float pen[6] = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f, 2.9f};
    qlt_sample_opts rep = {0.0f, 0, 1.0f, 2.0f};
    const int32_t history[4] = {1, 2, 2, 3};
    cr_expect_eq(qlt_sample_next(&rep, pen, 6, history, 4, &rng, scratch_buf), 5);
    cr_expect_float_eq(pen[1], 1.5f, 0.0f);
    cr_expect_float_eq(pen[3], -4.0f, 0.0f, "a repeated id is penalized once");
    cr_expect_float_eq(pen[0], 1.0f, 0.0f);
    /* top-k 1 and a tiny top-p both leave only the most likely id, whatever the draw */
    qlt_sample_opts k1 = {1.0f, 1, 1.0f, 1.0f}, p_small = {0.7f, 0, 0.01f, 1.0f};
    for (int i = 0; i < 50; i++) {
        float a[6] = {1.0f, 3.0f, 2.0f, -2.0f, 0.5f, 2.9f}, b[6] = {1.0f, 3.0f, 2.0f, -2.0f, 0.5f, 2.9f};
        cr_expect_eq(qlt_sample_next(&k1, a, 6, NULL, 0, &rng, scratch_buf), 1);
        cr_expect_eq(qlt_sample_next(&p_small, b, 6, NULL, 0, &rng, scratch_buf), 1);
    }
    qlt_sample_opts bad = {-1.0f, 0, 1.0f, 1.0f};
    cr_expect_neq(qlt_sample_check(&bad), 0);
    bad = (qlt_sample_opts){1.0f, 0, 0.0f, 1.0f};
    cr_expect_neq(qlt_sample_check(&bad), 0);
    cr_expect(strstr(qlt_error(), "--top-p"), "%s", qlt_error());
}

/* Draws from softmax(logits / T) after top-k and top-p: 40,000 seeded draws (deterministic for the seed) land on
 * each kept id within 1.5 points of its probability, and never on a filtered one. The expected distribution is
 * computed here from the definition: the 4 largest logits, the shortest prefix of them whose softmax reaches 0.9,
 * renormalized. */
Test(sample, draws_follow_the_distribution) {
    const float base[6] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.8f};
    qlt_sample_opts o = {1.0f, 4, 0.9f, 1.0f};
    /* the expected distribution: the 4 largest, then the shortest prefix reaching 0.9, renormalized */
    int order[6] = {0, 5, 1, 2, 3, 4};
    double p[6] = {0}, sum = 0;
    for (int i = 0; i < 4; i++) sum += exp(base[order[i]] - 2.0);
    int keep = 4;
    double cum = 0;
    for (int i = 0; i < 4; i++) {
        cum += exp(base[order[i]] - 2.0) / sum;
        if (cum >= 0.9) {
            keep = i + 1;
            break;
        }
    }
    double ksum = 0;
    for (int i = 0; i < keep; i++) ksum += exp(base[order[i]] - 2.0);
    for (int i = 0; i < keep; i++) p[order[i]] = exp(base[order[i]] - 2.0) / ksum;
    int counts[6] = {0};
    qlt_rng rng;
    qlt_rng_seed(&rng, 7);
    const int draws = 40000;
    for (int i = 0; i < draws; i++) {
        float l[6];
        memcpy(l, base, sizeof l);
        counts[qlt_sample_next(&o, l, 6, NULL, 0, &rng, scratch_buf)]++;
    }
    for (int id = 0; id < 6; id++) {
        if (p[id] == 0) cr_expect_eq(counts[id], 0, "id %d was filtered but drawn %d times", id, counts[id]);
        else cr_expect(fabs((double)counts[id] / draws - p[id]) < 0.015, "id %d: %.4f drawn vs %.4f", id,
                       (double)counts[id] / draws, p[id]);
    }
}

Test(generate, cli_generates_and_rejects_bad_options) {
    char *out;
    int status = test_run_cli(QLT_TEST_DATA "/../..",
                              "generate --config configs/demo.yaml --set train.device=cpu --prompt 'Four score' "
                              "--max-new-tokens 6 --raw",
                              &out);
    cr_expect_eq(status, 0, "%s", out);
    cr_expect(strstr(out, "generated 6 tokens"), "%s", out);
    free(out);
    status = test_run_cli(QLT_TEST_DATA "/../..", "generate --config configs/demo.yaml --max-new-tokens 6", &out);
    cr_expect_eq(status, 1, "%s", out);
    cr_expect(strstr(out, "qlora-train: error: generate needs one of --prompt"), "%s", out);
    free(out);
    status = test_run_cli(QLT_TEST_DATA "/../..", "generate --config configs/demo.yaml --prompt x --top-p 1.5", &out);
    cr_expect_eq(status, 1, "%s", out);
    cr_expect(strstr(out, "--top-p 1.5: must be in (0, 1]"), "%s", out);
    free(out);
    status = test_run_cli(QLT_TEST_DATA "/../..", "generate --config configs/demo.yaml --prompt x --adapter /nonexistent",
                          &out);
    cr_expect_eq(status, 1, "%s", out);
    cr_expect(strstr(out, "/nonexistent"), "the error names the adapter dir: %s", out);
    free(out);
}
