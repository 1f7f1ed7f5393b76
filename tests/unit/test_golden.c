/* test_golden.c: the CPU backend, in both modes (the reference ops and the default float32 / OpenBLAS ones),
 * against Hugging Face transformers + PEFT (float64 goldens) on the tiny fixtures (tiny-mistral: a sliding
 * window of 6 over 24 tokens, so the window decides what most queries see; tiny-qwen2-swa: Qwen2's window of
 * 5 on layer 1 only; tiny-gemma2: soft-capped scores and logits, window 6 on layer 0; tiny-gemma3: q/k norms,
 * window 5 on layers 0-1 with their own RoPE base, linear RoPE scaling on layer 2; tiny-phi3: Phi-3's fused
 * qkv_proj / gate_up_proj with one adapter each, LongRoPE's long factors and attention factor, partial rotary, a
 * window of 10; tiny-phi3-short: LongRoPE's short factors), at the same
 * tolerances for both: logits and loss without and with the initial adapter (F32 and BF16 weights), and every
 * LoRA gradient after one backward; with LoRA dropout (no golden for it), the gradients against central
 * differences of the loss the forward computes. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"
#include "backend/backend.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "cpu/backend_cpu.h"
#include "model/forward.h"
#include "model/gemma_model.h"
#include "model/lora.h"
#include "test_util.h"
#include "train/batch.h"

typedef struct golden_case {
    char model[32];
    char weights[32];
    double tol;    /* max |err| / max |ref| */
    int reference; /* 1: the CPU backend's reference mode (train.cpu_reference); 0: its default mode */
} golden_case;

typedef struct golden_run {
    qlt_backend *be;
    qlt_model model;
    qlt_lora lora;
    int has_lora;
    qlt_st_file golden;
    qlt_batch_buffers bb;
    qlt_graph g;
    qlt_optim_scalars *scalars;
    void *scratch;
    int64_t count;
    int batch, seq;
    const char *mode; /* "reference mode: " or "default mode: ", for the messages */
} golden_run;

/* Loads model (+ adapter-init when with_lora) and the golden batch on a CPU backend of the given mode.
 * weights = model file name. */
static void golden_setup(golden_run *r, const char *name, const char *weights, int with_lora, int reference) {
    memset(r, 0, sizeof *r);
    r->be = qlt_backend_cpu_create(0, reference);
    r->mode = reference ? "reference mode: " : "default mode: ";
    char *dir = test_fixture_path(name, NULL);
    /* model.bf16.safetensors lives beside model.safetensors: load via a temp dir holding a link */
    char *load_dir = dir;
    char *tmp = NULL;
    if (strcmp(weights, "model.safetensors") != 0) {
        tmp = test_tmpdir();
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cp %s/config.json %s/ && ln -s %s/%s %s/model.safetensors", dir, tmp, dir, weights, tmp);
        cr_assert_eq(system(cmd), 0);
        load_dir = tmp;
    }
    qlt_model_load_opts opts = {0};
    cr_assert_eq(qlt_model_load(&r->model, r->be, load_dir, &opts), 0, "%s", qlt_error());
    char *gpath = test_fixture_path(name, "golden.safetensors");
    cr_assert_eq(qlt_st_open(&r->golden, gpath), 0, "%s", qlt_error());
    int32_t *ids, *labels;
    test_golden_batch(name, &ids, &labels, &r->batch, &r->seq);
    cr_assert_eq(qlt_batch_buffers_init(&r->bb, r->be, r->batch, r->seq, r->model.cfg.sliding_window), 0);
    r->count = qlt_batch_upload(&r->bb, r->be, ids, labels, NULL);
    free(ids);
    free(labels);
    if (with_lora) {
        char *adir = test_fixture_path(name, "adapter-init");
        int rr, rs;
        float alpha, dropout;
        unsigned targets;
        cr_assert_eq(qlt_lora_read_peft_config(adir, &rr, &alpha, &targets, &rs, &dropout), 0, "%s", qlt_error());
        cr_assert_eq(qlt_lora_create(&r->lora, &r->model, rr, alpha, targets, rs, dropout), 0, "%s", qlt_error());
        cr_assert_eq(qlt_lora_load_peft(&r->lora, adir), 0, "%s", qlt_error());
        r->has_lora = 1;
        free(adir);
    }
    r->scalars = r->be->alloc(r->be, sizeof *r->scalars);
    memset(r->scalars, 0, sizeof *r->scalars);
    r->scratch = r->be->alloc(r->be, qlt_loss_scratch_bytes(&r->model, (int64_t)r->batch * r->seq));
    qlt_graph_init(&r->g, r->be, 1);
    free(gpath);
    if (tmp) {
        cr_assert_eq(qlt_remove_tree(tmp), 0, "%s", qlt_error());
        free(tmp);
    }
    free(dir);
}

/* Plans and runs one forward (and backward when train). Returns the final hidden value index. */
static int golden_forward(golden_run *r, int train) {
    qlt_forward_opts o = {.lora = r->has_lora ? &r->lora : NULL, .train = train, .scalars = r->scalars,
                          .loss_scratch = r->scratch};
    r->scalars->grad_scale = 1.0f / (float)r->count;
    for (int pass = 0; pass < 2; pass++) {
        qlt_graph_begin(&r->g, pass == 0);
        int hf = qlt_forward(&r->g, &r->model, &r->bb.dev, &o);
        if (train) qlt_graph_backward(&r->g);
        if (pass == 0) {
            cr_assert_eq(qlt_graph_commit_plan(&r->g), 0);
            r->scalars->loss_sum = 0;
        } else {
            return hf;
        }
    }
    return -1;
}

static void golden_teardown(golden_run *r) {
    qlt_graph_free(&r->g);
    r->be->free(r->be, r->scalars);
    r->be->free(r->be, r->scratch);
    qlt_batch_buffers_free(&r->bb, r->be);
    if (r->has_lora) qlt_lora_free(&r->lora);
    qlt_model_free(&r->model);
    qlt_st_close(&r->golden);
    r->be->destroy(r->be);
}

static void check_logits(golden_run *r, int hf, const char *golden_name, double tol) {
    int64_t n = (int64_t)r->batch * r->seq, numel;
    float *ref = test_read_f32(&r->golden, golden_name, &numel);
    cr_assert_eq(numel, n * r->model.cfg.vocab);
    float *logits = malloc(sizeof(float) * (size_t)numel);
    qlt_model_logits(&r->model, logits, r->g.values[hf].data, n); /* Gemma 2: soft-capped as transformers' */
    double err = test_rel_err(logits, ref, numel); if (getenv("QLT_TEST_VERBOSE")) fprintf(stderr, "%s %s err %.3g\n", r->model.cfg.arch_name, golden_name, err);
    cr_expect(err <= tol, "%s%s: max rel err %.3g > %.1g", r->mode, golden_name, err, tol);
    free(logits);
    free(ref);
}

static void check_loss(golden_run *r, const char *golden_name, int index, double tol) {
    float *ref = test_read_f32(&r->golden, golden_name, NULL);
    double loss = r->scalars->loss_sum / (double)r->count;
    double err = fabs(loss - ref[index]) / fabs(ref[index]);
    cr_expect(err <= tol, "%s%s[%d]: loss %.8f vs golden %.8f (rel %.3g > %.1g)", r->mode, golden_name, index, loss,
              ref[index], err, tol);
    free(ref);
}

ParameterizedTestParameters(golden, forward) {
    static golden_case cases[] = {
        {"tiny-qwen2", "model.safetensors", 1e-5, 1},
        {"tiny-qwen2", "model.safetensors", 1e-5, 0},
        {"tiny-llama", "model.safetensors", 1e-5, 1},
        {"tiny-llama", "model.safetensors", 1e-5, 0},
        {"tiny-qwen3", "model.safetensors", 1e-5, 1},
        {"tiny-qwen3", "model.safetensors", 1e-5, 0},
        {"tiny-mistral", "model.safetensors", 1e-5, 1},
        {"tiny-mistral", "model.safetensors", 1e-5, 0},
        {"tiny-qwen2-swa", "model.safetensors", 1e-5, 1},
        {"tiny-qwen2-swa", "model.safetensors", 1e-5, 0},
        {"tiny-gemma2", "model.safetensors", 1e-5, 1},
        {"tiny-gemma2", "model.safetensors", 1e-5, 0},
        {"tiny-gemma3", "model.safetensors", 1e-5, 1},
        {"tiny-gemma3", "model.safetensors", 1e-5, 0},
        {"tiny-phi3", "model.safetensors", 1e-5, 1},
        {"tiny-phi3", "model.safetensors", 1e-5, 0},
        {"tiny-phi3-short", "model.safetensors", 1e-5, 1},
        {"tiny-phi3-short", "model.safetensors", 1e-5, 0},
        {"tiny-qwen2", "model.bf16.safetensors", 2e-2, 1},
        {"tiny-qwen2", "model.bf16.safetensors", 2e-2, 0},
        {"tiny-llama", "model.bf16.safetensors", 2e-2, 1},
        {"tiny-llama", "model.bf16.safetensors", 2e-2, 0},
        {"tiny-qwen3", "model.bf16.safetensors", 2e-2, 1},
        {"tiny-qwen3", "model.bf16.safetensors", 2e-2, 0},
        {"tiny-mistral", "model.bf16.safetensors", 2e-2, 1},
        {"tiny-mistral", "model.bf16.safetensors", 2e-2, 0},
        {"tiny-gemma2", "model.bf16.safetensors", 2e-2, 1},
        {"tiny-gemma2", "model.bf16.safetensors", 2e-2, 0},
        {"tiny-gemma3", "model.bf16.safetensors", 2e-2, 1},
        {"tiny-gemma3", "model.bf16.safetensors", 2e-2, 0},
        {"tiny-phi3", "model.bf16.safetensors", 2e-2, 1},
        {"tiny-phi3", "model.bf16.safetensors", 2e-2, 0},
    };
    return cr_make_param_array(golden_case, cases, sizeof cases / sizeof cases[0]);
}

/* bf16 weights: the goldens come from the F32 weights, so the tolerance is that of rounding every weight
 * to bf16 (relative 2^-9 per weight, a few 1e-3 on logits). */
ParameterizedTest(golden_case *c, golden, forward) {
    golden_run r;
    golden_setup(&r, c->model, c->weights, 0, c->reference);
    int hf = golden_forward(&r, 0);
    check_logits(&r, hf, "base_logits", c->tol);
    check_loss(&r, "base_loss", 0, c->tol);
    golden_teardown(&r);

    golden_setup(&r, c->model, c->weights, 1, c->reference);
    hf = golden_forward(&r, 0);
    check_logits(&r, hf, "lora_logits", c->tol);
    check_loss(&r, "losses", 0, c->tol);
    golden_teardown(&r);
}

ParameterizedTestParameters(golden, gradients) {
    static golden_case cases[] = {
        {"tiny-qwen2", "model.safetensors", 1e-4, 1},
        {"tiny-qwen2", "model.safetensors", 1e-4, 0},
        {"tiny-llama", "model.safetensors", 1e-4, 1},
        {"tiny-llama", "model.safetensors", 1e-4, 0},
        {"tiny-qwen3", "model.safetensors", 1e-4, 1},
        {"tiny-qwen3", "model.safetensors", 1e-4, 0},
        {"tiny-mistral", "model.safetensors", 1e-4, 1},
        {"tiny-mistral", "model.safetensors", 1e-4, 0},
        {"tiny-qwen2-swa", "model.safetensors", 1e-4, 1},
        {"tiny-qwen2-swa", "model.safetensors", 1e-4, 0},
        {"tiny-gemma2", "model.safetensors", 1e-4, 1},
        {"tiny-gemma2", "model.safetensors", 1e-4, 0},
        {"tiny-gemma3", "model.safetensors", 1e-4, 1},
        {"tiny-gemma3", "model.safetensors", 1e-4, 0},
        {"tiny-phi3", "model.safetensors", 1e-4, 1},
        {"tiny-phi3", "model.safetensors", 1e-4, 0},
        {"tiny-phi3-short", "model.safetensors", 1e-4, 1},
        {"tiny-phi3-short", "model.safetensors", 1e-4, 0},
    };
    return cr_make_param_array(golden_case, cases, sizeof cases / sizeof cases[0]);
}

/* Every grad.* tensor: max |err| <= 1e-4 * max |golden| of that tensor. */
ParameterizedTest(golden_case *c, golden, gradients) {
    golden_run r;
    golden_setup(&r, c->model, c->weights, 1, c->reference);
    golden_forward(&r, 1);
    check_loss(&r, "losses", 0, 1e-5);
    test_check_lora_grads(&r.lora, &r.golden, c->tol, r.mode);
    golden_teardown(&r);
}

/* With LoRA dropout each adapter of a group (q/k/v, gate/up) sees its own mask and runs alone; the
 * gradients must still be those of the loss the forward computes. Checked against central differences
 * of that loss (same seed, so the same masks) on the largest-gradient element of every A and B of the
 * first and last layers. */
static double dropout_loss(golden_run *r, const uint64_t *seed, int *planned) {
    qlt_forward_opts o = {.lora = &r->lora, .train = 1, .dropout_seed = seed, .scalars = r->scalars,
                          .loss_scratch = r->scratch};
    r->scalars->grad_scale = 1.0f / (float)r->count;
    if (!*planned) {
        qlt_graph_begin(&r->g, 1);
        qlt_forward(&r->g, &r->model, &r->bb.dev, &o);
        qlt_graph_backward(&r->g);
        cr_assert_eq(qlt_graph_commit_plan(&r->g), 0);
        *planned = 1;
    }
    memset(r->lora.grads, 0, sizeof(float) * (size_t)r->lora.n_params);
    r->scalars->loss_sum = 0;
    qlt_graph_begin(&r->g, 0);
    qlt_forward(&r->g, &r->model, &r->bb.dev, &o);
    qlt_graph_backward(&r->g);
    return (double)r->scalars->loss_sum / (double)r->count;
}

ParameterizedTestParameters(golden, dropout_gradients) {
    static golden_case cases[] = {
        {"tiny-qwen2", "model.safetensors", 2e-2, 1},
        {"tiny-qwen2", "model.safetensors", 2e-2, 0},
        {"tiny-llama", "model.safetensors", 2e-2, 1},
        {"tiny-llama", "model.safetensors", 2e-2, 0},
        {"tiny-qwen3", "model.safetensors", 2e-2, 1},
        {"tiny-qwen3", "model.safetensors", 2e-2, 0},
        {"tiny-mistral", "model.safetensors", 2e-2, 1},
        {"tiny-mistral", "model.safetensors", 2e-2, 0},
        {"tiny-gemma2", "model.safetensors", 2e-2, 1},
        {"tiny-gemma2", "model.safetensors", 2e-2, 0},
        {"tiny-gemma3", "model.safetensors", 2e-2, 1},
        {"tiny-gemma3", "model.safetensors", 2e-2, 0},
        {"tiny-phi3", "model.safetensors", 2e-2, 1},
        {"tiny-phi3", "model.safetensors", 2e-2, 0},
    };
    return cr_make_param_array(golden_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(golden_case *c, golden, dropout_gradients) {
    golden_run r;
    golden_setup(&r, c->model, c->weights, 1, c->reference);
    r.lora.dropout = 0.25f;
    uint64_t *seed = r.be->alloc(r.be, sizeof *seed);
    *seed = 0x9e3779b97f4a7c15ull;
    int planned = 0;
    double loss0 = dropout_loss(&r, seed, &planned);
    float *grads = malloc(sizeof(float) * (size_t)r.lora.n_params);
    memcpy(grads, r.lora.grads, sizeof(float) * (size_t)r.lora.n_params);
    /* the masks matter: without dropout the loss differs */
    r.lora.dropout = 0.0f;
    qlt_graph_free(&r.g);
    qlt_graph_init(&r.g, r.be, 1);
    int planned0 = 0;
    double loss_nodrop = dropout_loss(&r, seed, &planned0);
    cr_assert(fabs(loss_nodrop - loss0) > 1e-6, "dropout changed nothing: %.9g vs %.9g", loss0, loss_nodrop);
    r.lora.dropout = 0.25f;
    qlt_graph_free(&r.g);
    qlt_graph_init(&r.g, r.be, 1);
    planned = 0;
    int checked = 0;
    int layers[2] = {0, r.lora.n_layers - 1};
    for (int li = 0; li < 2; li++) {
        for (int p = 0; p < QLT_PROJ_COUNT; p++) {
            const qlt_lora_slot *s = &r.lora.slots[layers[li]][p];
            for (int which = 0; which < 2; which++) {
                int64_t off = which ? qlt_lora_offset_b(&r.lora, s) : s->offset_a;
                int64_t count = which ? s->out * r.lora.r : r.lora.r * s->in, best = off;
                for (int64_t i = off; i < off + count; i++)
                    if (fabsf(grads[i]) > fabsf(grads[best])) best = i;
                float keep = r.lora.params[best], eps = 1e-2f;
                r.lora.params[best] = keep + eps;
                double up = dropout_loss(&r, seed, &planned);
                r.lora.params[best] = keep - eps;
                double down = dropout_loss(&r, seed, &planned);
                r.lora.params[best] = keep;
                double fd = (up - down) / (2.0 * (double)eps), an = grads[best];
                cr_expect(fabs(fd - an) <= c->tol * fabs(an) + 1e-5,
                          "%s%s layer %d proj %d %c[%lld]: analytic %.6g vs central difference %.6g", r.mode, c->model,
                          layers[li], p, which ? 'B' : 'A', (long long)(best - off), an, fd);
                checked++;
            }
        }
    }
    cr_assert_eq(checked, 2 * QLT_PROJ_COUNT * 2);
    free(grads);
    r.be->free(r.be, seed);
    golden_teardown(&r);
}
