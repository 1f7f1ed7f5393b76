/* trainer.c: the training loop (see trainer.h). */
#define _GNU_SOURCE
#include "train/trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/counter_hash.h"
#include "common/env.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "common/rng.h"
#include "data/chat_template.h"
#include "formats/gguf.h"
#include "formats/gguf_tokenizer.h"
#include "model/forward.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/device.h"
#include "train/eval_data.h"
#include "train/input_files.h"
#include "train/run_log.h"
#include "train/run_tokenizer.h"

static uint64_t mix64(uint64_t a, uint64_t b) {
    return qlt_splitmix_finalize(a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2)));
}

/* The row order of an epoch is a pure function of (seed, epoch): resuming needs only epoch + cursor. */
static void make_epoch_order(qlt_trainer *t) {
    for (int64_t i = 0; i < t->train.n_rows; i++) t->order[i] = i;
    if (t->cfg->data.shuffle) {
        qlt_rng rng;
        qlt_rng_seed(&rng, mix64(t->cfg->train.seed, 0x5eed0000ull + (uint64_t)t->epoch));
        qlt_rng_shuffle(&rng, t->order, t->train.n_rows);
    }
}

static int load_model_and_adapter(qlt_trainer *t, qlt_trainer_mode mode) {
    const qlt_config *cfg = t->cfg;
    qlt_model_load_opts opts = {.nf4 = cfg->model.quant == QLT_QUANT_NF4,
                                .nf4_blocksize = cfg->model.nf4_blocksize,
                                .double_quant = cfg->model.double_quant};
    if (qlt_model_open(&t->model, t->be, cfg->model.path, &opts, mix64(cfg->train.seed, 0x30de1ull)) != 0) return -1;
    t->model_loaded = 1;
    int r = cfg->lora.r, rslora = cfg->lora.rslora;
    float alpha = cfg->lora.alpha, dropout = cfg->lora.dropout;
    unsigned targets = cfg->lora.targets;
    const char *init = cfg->lora.init_from;
    if (init && init[0]) {
        /* the adapter's own shape wins: r, alpha and targets come from its adapter_config.json */
        float file_dropout;
        QLT_TRY(qlt_lora_read_peft_config(init, &r, &alpha, &targets, &rslora, &file_dropout));
        if (r != cfg->lora.r || alpha != cfg->lora.alpha || targets != cfg->lora.targets || rslora != cfg->lora.rslora)
            fprintf(stderr, "qlora-train: lora.init_from: the adapter's own r %d, alpha %g, targets and rslora are used; "
                            "the config's lora.r %d, lora.alpha %g, lora.targets and lora.rslora are not\n",
                    r, alpha, cfg->lora.r, cfg->lora.alpha);
    } else if (mode == QLT_TRAINER_EVAL) {
        return 0; /* evaluate the base model */
    }
    QLT_TRY(qlt_lora_create(&t->lora, &t->model, r, alpha, targets, rslora, dropout));
    t->has_lora = 1;
    if (init && init[0]) return qlt_lora_load_peft(&t->lora, init);
    qlt_lora_init_default(&t->lora, cfg->train.seed);
    return 0;
}

/* Every input id and label (other than -100) of ds must index the model's vocabulary: the embedding and the
 * loss read rows by id, so an id from a tokens file or a tokenizer of another model would read past them. */
static int check_ids(const qlt_dataset *ds, const char *what, int32_t vocab, qlt_data_format format) {
    int64_t n = ds->n_rows * (int64_t)ds->seq_len;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ds->input_ids[i], label = ds->labels[i];
        int bad_id = id < 0 || id >= vocab, bad_label = label != -100 && (label < 0 || label >= vocab);
        if (!bad_id && !bad_label) continue;
        return qlt_fail("%s: %s %d (row %lld, position %lld) is outside the model's vocabulary of %d ids (data.format: "
                        "%s): token ids must be below %d; check that the data (or data.tokenizer) belongs to "
                        "model.path", what, bad_id ? "token id" : "label", bad_id ? id : label,
                        (long long)(i / ds->seq_len), (long long)(i % ds->seq_len), vocab,
                        qlt_config_enum_text("data.format", format), vocab);
    }
    return 0;
}

static int load_datasets(qlt_trainer *t, qlt_trainer_mode mode) {
    const qlt_config *cfg = t->cfg;
    char *cache = !cfg->data.cache ? NULL
                  : cfg->data.cache_dir && cfg->data.cache_dir[0] ? qlt_xstrdup(cfg->data.cache_dir)
                                                                  : qlt_path_join(cfg->output.dir, "cache");
    char *model_dir = qlt_model_dir_of(cfg->model.path);
    int rc = 0;
    qlt_tokenizer *model_tok = NULL; /* a GGUF model's own tokenizer, when data.tokenizer does not name one */
    if (cfg->data.format != QLT_DATA_FORMAT_TOKENS && !(cfg->data.tokenizer && cfg->data.tokenizer[0]) &&
        qlt_gguf_is_gguf(cfg->model.path) && qlt_gguf_tokenizer_load_file(&model_tok, cfg->model.path) != 0)
        rc = qlt_fail_context("the tokenizer of model.path (set data.tokenizer to use another)");
    if (rc == 0 && cache) rc = qlt_mkdirs(cache);
    if (rc == 0 && mode == QLT_TRAINER_TRAIN) {
        if (cfg->data.train.count == 0)
            rc = qlt_fail("data.train is empty: name at least one .jsonl file (--set data.train=path.jsonl)");
        else
            rc = qlt_dataset_build_with(&t->train, cfg, &cfg->data.train, model_dir, model_tok, cache);
        if (rc == 0 && cfg->data.eval.count == 0 && cfg->data.eval_split > 0)
            rc = qlt_dataset_split(&t->train, &t->eval, cfg->data.eval_split, cfg->train.seed);
    }
    if (rc == 0 && cfg->data.eval.count > 0)
        rc = qlt_dataset_build_with(&t->eval, cfg, &cfg->data.eval, model_dir, model_tok, cache);
    if (rc == 0 && mode == QLT_TRAINER_EVAL && t->eval.n_rows == 0) { /* training's eval data: data.eval_split */
        if (cfg->data.train.count > 0)
            rc = qlt_dataset_build_with(&t->train, cfg, &cfg->data.train, model_dir, model_tok, cache);
        else rc = qlt_fail("nothing to evaluate: set data.eval (or data.train) to a .jsonl file");
        if (rc == 0) rc = qlt_eval_rows_of_train(&t->train, &t->eval, cfg->data.eval_split, cfg->train.seed);
    }
    qlt_tokenizer_free(model_tok);
    free(cache);
    free(model_dir);
    const char *eval_name = cfg->data.eval.count > 0 ? "data.eval" : "data.train";
    if (rc == 0) rc = check_ids(&t->train, "data.train", t->model.cfg.vocab, cfg->data.format);
    if (rc == 0) rc = check_ids(&t->eval, eval_name, t->model.cfg.vocab, cfg->data.format);
    if (rc == 0 && mode == QLT_TRAINER_TRAIN && t->train.n_label_tokens == 0)
        rc = qlt_fail("data.train has no tokens with labels (every label is -100, e.g. prompts that fill data.seq_len): "
                      "no step would train anything; check the data, raise data.seq_len or set data.train_on_prompt: true");
    if (rc == 0) {
        const qlt_dataset *ds = mode == QLT_TRAINER_TRAIN ? &t->train : &t->eval;
        fprintf(stderr, "qlora-train: data: %lld examples -> %lld rows of %d tokens (%lld tokens with loss)%s",
                (long long)ds->n_examples, (long long)ds->n_rows, cfg->data.seq_len, (long long)ds->n_label_tokens,
                ds->n_truncated || ds->n_skipped ? "" : "\n");
        if (ds->n_truncated || ds->n_skipped)
            fprintf(stderr, "; %lld examples longer than data.seq_len truncated, %lld bad lines skipped\n",
                    (long long)ds->n_truncated, (long long)ds->n_skipped);
    }
    return rc;
}

/* Records the planning pass of plan_id (QLT_PLAN_TRAIN: forward + backward of a micro-batch;
 * QLT_PLAN_EVAL: a forward) into the graphs, with or without layer checkpointing. */
static void plan_pass(qlt_trainer *t, int checkpointing, int plan_id) {
    qlt_graph_begin_plan(&t->graph, 1, plan_id);
    qlt_forward_opts o = {.lora = t->has_lora ? &t->lora : NULL, .train = plan_id == QLT_PLAN_TRAIN && t->has_lora,
                          .dropout_seed = t->dropout_seeds, .scalars = t->scalars, .loss_scratch = t->loss_scratch,
                          .recompute = checkpointing ? &t->recompute : NULL};
    qlt_forward(&t->graph, &t->model, &t->bbs[0].dev, &o);
    if (o.train) qlt_graph_backward(&t->graph);
}

size_t qlt_trainer_measure_plan(qlt_trainer *t, int checkpointing, int plan_id) {
    qlt_graph_free(&t->graph);
    qlt_graph_free(&t->recompute);
    qlt_graph_init(&t->graph, t->be, 1);     /* lifetime-planned: buffers share memory when they can */
    qlt_graph_init(&t->recompute, t->be, 0); /* one layer at a time: simply bump-allocated */
    plan_pass(t, checkpointing, plan_id);
    return qlt_graph_planned_bytes(&t->graph) + t->recompute.arena_peak;
}

/* Chooses checkpointing (train.grad_checkpoint: none | layer | auto), plans every pass the trainer runs
 * (training micro-step, evaluation forward) and allocates the arenas, all before the first step. */
static int plan_graph(qlt_trainer *t, qlt_trainer_mode mode) {
    qlt_grad_checkpoint ckpt_mode = t->cfg->train.grad_checkpoint;
    int ckpt = ckpt_mode == QLT_GRAD_CHECKPOINT_LAYER;
    int first = mode == QLT_TRAINER_TRAIN ? QLT_PLAN_TRAIN : QLT_PLAN_EVAL;
    size_t need = qlt_trainer_measure_plan(t, ckpt, first);
    if (ckpt_mode == QLT_GRAD_CHECKPOINT_AUTO && !ckpt) {
        size_t avail = t->be->available_bytes ? t->be->available_bytes(t->be) : 0;
        if (avail && need > avail / 10 * 9) { /* keep 10% for the libraries' workspaces */
            size_t with = qlt_trainer_measure_plan(t, 1, first);
            fprintf(stderr, "qlora-train: activations need %.2f GiB, %.2f GiB free: layer checkpointing (%.2f GiB)\n",
                    need / 1073741824.0, avail / 1073741824.0, with / 1073741824.0);
            ckpt = 1;
        }
    }
    t->checkpointing = ckpt;
    QLT_TRY(qlt_graph_commit_plan(&t->graph));
    if (ckpt) QLT_TRY(qlt_graph_commit_plan(&t->recompute));
    if (first == QLT_PLAN_TRAIN) { /* evaluation during training: its own plan in the same arena */
        plan_pass(t, ckpt, QLT_PLAN_EVAL);
        QLT_TRY(qlt_graph_commit_plan(&t->graph));
        if (ckpt) QLT_TRY(qlt_graph_commit_plan(&t->recompute));
    }
    return 0;
}

/* Which attention the backend runs for this run's shape (building cuDNN's plans now, before any capture), into
 * t->attention_plan, said in one line; with train.attention: cudnn, anything but cuDNN's is an error naming why. */
static int choose_attention(qlt_trainer *t) {
    const qlt_model_config *mc = &t->model.cfg;
    const qlt_backend *be = t->be;
    t->attention_plan = QLT_ATTENTION_OWN;
    if (!be->attention_plan) return 0;
    t->attention_plan = be->attention_plan(t->be, t->micro_batch, t->seq, mc->n_heads, mc->n_kv_heads, mc->head_dim,
                                           qlt_model_attn_scale(mc));
    if (t->attention_plan == QLT_ATTENTION_OWN && t->cfg->train.attention == QLT_ATTENTION_IMPL_CUDNN) {
        if (!be->cudnn_version)
            return qlt_fail("train.attention: cudnn, but cuDNN 9 is not available (libcudnn.so.9 cannot be loaded, "
                            "or this build has no cuDNN support): install cuDNN 9 (or point "
                            "QLT_CUDNN_LIBRARY at its libcudnn.so.9), or set train.attention: auto");
        if (be->max_row_examples > QLT_FUSED_ATTENTION_MAX_ROW_EXAMPLES)
            return qlt_fail("train.attention: cudnn, but the data's rows hold up to %d packed examples (cuDNN's "
                            "attention takes up to %d): set train.attention: auto, or data.packing: false, or a "
                            "shorter data.seq_len", be->max_row_examples, QLT_FUSED_ATTENTION_MAX_ROW_EXAMPLES);
        return qlt_fail("train.attention: cudnn, but cuDNN %d rejects this attention (%d heads / %d kv heads of %d, "
                        "seq %d): set train.attention: auto", be->cudnn_version, mc->n_heads, mc->n_kv_heads,
                        mc->head_dim, t->seq);
    }
    if (t->attention_plan == QLT_ATTENTION_FUSED_RAGGED)
        fprintf(stderr, "qlora-train: attention: cuDNN fused, ragged (up to %d examples a row)\n", be->max_row_examples);
    else
        fprintf(stderr, "qlora-train: attention: %s\n",
                t->attention_plan == QLT_ATTENTION_FUSED_DENSE ? "cuDNN fused (one example a row)" : "own kernels");
    return 0;
}

/* output.sample_prompt's tokenizer (before the model loads: a missing file is found at once) and its form: a user
 * turn of the chat template when the tokenizer has one, else the raw text. */
static int open_sample_tokenizer(qlt_trainer *t) {
    const qlt_config *cfg = t->cfg;
    QLT_TRY(qlt_run_tokenizer_open(cfg, &t->sample_tok));
    qlt_generate_opts *o = &t->sample_opts;
    *o = (qlt_generate_opts){cfg->output.sample_tokens, {0.0f, 0, 1.0f, 1.0f}, 0, QLT_CHAT_TEMPLATE_CHATML, NULL};
    if (qlt_chat_template_resolve(cfg->data.chat_template, t->sample_tok, &o->tmpl) == 0) {
        o->chat = 1;
    } else {
        fprintf(stderr, "qlora-train: output.sample_prompt goes in as raw text (%s)\n", qlt_error());
    }
    return 0;
}

/* The test hooks QLT_TEST_NAN_AT_STEP (N or N-M) and QLT_TEST_DEVICE_FAULT (step:N:recoverable|sticky), each a fault in
 * the middle of step N (docs/RELIABILITY.md). */
static int read_test_hooks(qlt_trainer *t) {
    const char *nan_at = qlt_env(QLT_ENV_TEST_NAN_AT_STEP), *fault = qlt_env(QLT_ENV_TEST_DEVICE_FAULT);
    if (nan_at) {
        char *end;
        long long first = strtoll(nan_at, &end, 10), last = first;
        if (*end == '-') last = strtoll(end + 1, &end, 10);
        if (*end || first < 1 || last < first)
            return qlt_fail("QLT_TEST_NAN_AT_STEP=%s: expected a step number N >= 1 or a range N-M (or unset it)",
                            nan_at);
        t->test_nan_step = first;
        t->test_nan_last = last;
    }
    if (fault) {
        long long n = 0;
        char kind[16] = "";
        int used = 0;
        if (sscanf(fault, "step:%lld:%15[a-z]%n", &n, kind, &used) != 2 || fault[used] || n < 1 ||
            (strcmp(kind, "recoverable") != 0 && strcmp(kind, "sticky") != 0))
            return qlt_fail("QLT_TEST_DEVICE_FAULT=%s: expected step:N:recoverable or step:N:sticky (or unset it)",
                            fault);
        t->test_fault_step = n;
        t->test_fault_sticky = strcmp(kind, "sticky") == 0;
    }
    return 0;
}

int qlt_trainer_init(qlt_trainer *t, const qlt_config *cfg, qlt_trainer_mode mode) {
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    t->dist_world = 1;
    t->micro_batch = cfg->train.micro_batch;
    t->grad_accum = mode == QLT_TRAINER_TRAIN ? cfg->train.grad_accum : 1;
    t->seq = cfg->data.seq_len;
    if (!cfg->model.path || !cfg->model.path[0])
        return qlt_fail("model.path is empty: set it to a Hugging Face model directory, a .gguf file or random:CONFIG.json, "
                        "e.g. --set model.path=/models/Qwen2.5-7B");
    t->be = qlt_device_backend_create_on(cfg->train.device, cfg->train.threads, cfg->train.cpu_reference,
                                         mode == QLT_TRAINER_TRAIN ? qlt_dp_gpu_index() : 0);
    if (!t->be) return -1;
    if (mode == QLT_TRAINER_TRAIN && qlt_dp_open(t) != 0) goto fail; /* data parallel: meet the other ranks */
    /* a device error in training unwinds to the trainer, which saves what it can (qlt_trainer_run) */
    if (mode == QLT_TRAINER_TRAIN) t->be->fault_unwind = 1;
    if (mode == QLT_TRAINER_TRAIN && read_test_hooks(t) != 0) goto fail;
    if (strcmp(t->be->name, "cuda") == 0) {
        if (cfg->train.backward_a == QLT_BACKWARD_PRECISION_FP16) t->be->backward_a = QLT_BACKWARD_A_FP16;
        else if (cfg->train.backward_a == QLT_BACKWARD_PRECISION_FP32) t->be->backward_a = QLT_BACKWARD_A_FP32;
        else t->be->backward_a = QLT_BACKWARD_A_BF16;
        t->be->deterministic = cfg->train.deterministic;
        t->be->attention_own = cfg->train.attention == QLT_ATTENTION_IMPL_OWN;
    } else if (cfg->train.attention == QLT_ATTENTION_IMPL_CUDNN) {
        qlt_fail("train.attention: cudnn needs the CUDA backend, but this run is on the %s one: set "
                 "train.attention: auto (or train.device: cuda on a GPU machine)", t->be->name);
        goto fail;
    }
    {   /* train.dequant_cache_gib (a huge value: no limit) */
        double bytes = (double)cfg->train.dequant_cache_gib * 1073741824.0;
        t->be->dequant_cache_bytes = bytes >= 4e18 ? (int64_t)4e18 : (int64_t)bytes;
    }
    t->eval_loss_first = t->eval_loss_last = NAN;
    if (mode == QLT_TRAINER_TRAIN && cfg->output.sample_prompt && cfg->output.sample_prompt[0] &&
        open_sample_tokenizer(t) != 0)
        goto fail;
    if (qlt_check_input_files(cfg, mode == QLT_TRAINER_TRAIN) != 0) goto fail; /* fails fast, before the model loads */
    if (qlt_memory_plan_check(&t->mem_plan, cfg, t->be, mode == QLT_TRAINER_TRAIN) != 0) goto fail;
    double load_start = qlt_now_seconds();
    if (load_model_and_adapter(t, mode) != 0) goto fail;
    if (qlt_model_window_matters(&t->model.cfg, t->seq) && strcmp(t->be->name, "cpu") != 0) {
        qlt_fail("%s: sliding_window %d is shorter than data.seq_len %d: sliding-window attention runs on the CPU "
                 "path (train.device: cpu) and the GPU path does not support it yet (or set data.seq_len <= %d)",
                 cfg->model.path, t->model.cfg.sliding_window, t->seq, t->model.cfg.sliding_window);
        goto fail;
    }
    fprintf(stderr, "qlora-train: model loaded in %.2f s (%s%s)\n", qlt_now_seconds() - load_start, t->model.cfg.arch_name,
            t->model.quantized ? ", NF4" : "");
    if (t->mem_plan.total > 0) { /* made before the load (qlt_memory_plan_check) */
        char plan[512];
        qlt_memory_plan_describe(&t->mem_plan, plan, sizeof plan);
        fprintf(stderr, "qlora-train: memory plan: %s\n", plan);
    }
    if (load_datasets(t, mode) != 0) goto fail;
    {   /* lets the backend drop packed-example masking where no batch needs it (CUDA: cuDNN's attention) */
        int train_most = qlt_dataset_max_row_examples(&t->train), eval_most = qlt_dataset_max_row_examples(&t->eval);
        t->be->max_row_examples = train_most > eval_most ? train_most : eval_most;
    }
    /* graphs: every micro-batch of a step has its own buffers (the captured step reads fixed addresses) */
    t->graph_mode = mode == QLT_TRAINER_TRAIN && cfg->train.cuda_graph; /* CUDA_GRAPH: qlt_config_apply_env */
    if (t->graph_mode && !t->be->capture_begin) {
        fprintf(stderr, "qlora-train: the %s backend has no graphs: train.cuda_graph ignored\n", t->be->name);
        t->graph_mode = 0;
    }
    t->n_bbs = t->graph_mode ? t->grad_accum : 1;
    t->bbs = qlt_xcalloc((size_t)t->n_bbs, sizeof *t->bbs);
    for (int i = 0; i < t->n_bbs; i++)
        if (qlt_batch_buffers_init(&t->bbs[i], t->be, t->micro_batch, t->seq, t->model.cfg.sliding_window) != 0)
            goto fail;
    if (t->graph_mode) {
        t->pinned = t->be->host_alloc(t->be, sizeof *t->pinned);
        t->pinned_seeds = t->be->host_alloc(t->be, sizeof(uint64_t) * (size_t)t->grad_accum);
        if (!t->pinned || !t->pinned_seeds) {
            qlt_fail("cannot allocate pinned host memory for CUDA graphs (set train.cuda_graph=false)");
            goto fail;
        }
    }
    size_t stage = sizeof(int32_t) * (size_t)t->micro_batch * (size_t)t->seq;
    t->stage_ids = qlt_xmalloc(stage);
    t->stage_labels = qlt_xmalloc(stage);
    t->stage_seg = qlt_xmalloc(stage);
    t->stage_seeds = qlt_xcalloc((size_t)t->grad_accum, sizeof(uint64_t));
    t->scalars = t->be->alloc(t->be, sizeof *t->scalars);
    t->dropout_seeds = t->be->alloc(t->be, sizeof(uint64_t) * (size_t)t->grad_accum);
    t->loss_scratch = t->be->alloc(t->be, qlt_loss_scratch_bytes(&t->model, (int64_t)t->micro_batch * t->seq));
    if (!t->scalars || !t->loss_scratch || !t->dropout_seeds) {
        qlt_fail("out of %s memory", t->be->name);
        goto fail;
    }
    {   /* the optimizer's counters start at zero (a resume sets them from the checkpoint) */
        qlt_optim_scalars zero = {0};
        t->be->upload(t->be, t->scalars, &zero, sizeof zero);
    }
    if (plan_graph(t, mode) != 0) goto fail;
    if (choose_attention(t) != 0) goto fail;
    if (t->be->fault_state) {
        char msg[256];
        if (t->be->fault_state(t->be, msg, sizeof msg) != QLT_FAULT_NONE) {
            qlt_fail("%s device error while loading: %s; check the device (nvidia-smi) and start the run again",
                     t->be->name, msg);
            goto fail;
        }
    }
    if (mode == QLT_TRAINER_TRAIN) {
        int64_t rows_per_step = (int64_t)t->micro_batch * t->grad_accum * t->dist_world;
        if (t->train.n_rows < rows_per_step) {
            qlt_fail("data.train yields %lld rows of %d tokens but one step needs micro_batch x grad_accum x ranks = "
                     "%lld: add data, or lower train.micro_batch / train.grad_accum / data.seq_len",
                     (long long)t->train.n_rows, t->seq, (long long)rows_per_step);
            goto fail;
        }
        t->steps_per_epoch = t->train.n_rows / rows_per_step;
        t->total_steps = cfg->train.max_steps > 0 ? cfg->train.max_steps
                                                   : (int64_t)ceil(cfg->train.epochs * (double)t->steps_per_epoch);
        qlt_schedule_kind kind = cfg->train.schedule == QLT_LR_SCHEDULE_COSINE   ? QLT_SCHEDULE_COSINE
                                 : cfg->train.schedule == QLT_LR_SCHEDULE_LINEAR ? QLT_SCHEDULE_LINEAR
                                                                                 : QLT_SCHEDULE_CONSTANT;
        qlt_schedule_init(&t->schedule, kind, cfg->train.lr, t->total_steps, cfg->train.warmup_steps,
                          cfg->train.warmup_ratio, cfg->train.min_lr_ratio);
        t->order = qlt_xmalloc(sizeof(int64_t) * (size_t)t->train.n_rows);
        make_epoch_order(t);
    }
    return 0;
fail:
    qlt_trainer_free(t);
    return -1;
}

/* Copies rows [first, first + micro_batch) of `order` (or of ds directly when order == NULL) into the
 * staging buffers; rows past the end of ds become empty rows (no loss). */
static void stage_rows(qlt_trainer *t, const qlt_dataset *ds, const int64_t *order, int64_t first) {
    int seq = t->seq;
    for (int b = 0; b < t->micro_batch; b++) {
        int64_t pos = first + b;
        size_t dst = (size_t)b * seq;
        if (pos >= ds->n_rows) {
            for (int s = 0; s < seq; s++) {
                t->stage_ids[dst + s] = 0;
                t->stage_labels[dst + s] = -100;
                t->stage_seg[dst + s] = 0;
            }
            continue;
        }
        int64_t row = order ? order[pos] : pos;
        size_t src = (size_t)row * seq;
        memcpy(t->stage_ids + dst, ds->input_ids + src, sizeof(int32_t) * (size_t)seq);
        memcpy(t->stage_labels + dst, ds->labels + src, sizeof(int32_t) * (size_t)seq);
        memcpy(t->stage_seg + dst, ds->seg_start + src, sizeof(int32_t) * (size_t)seq);
    }
}

/* The host side of step t->step: epoch rollover, the loss normalizer over every counted token of the
 * step (across micro-batches), the optimizer scalars and the dropout seeds (into t->stage_seeds). */
static void prepare_step(qlt_trainer *t, qlt_optim_scalars *s, int64_t *counted_out) {
    const qlt_config *cfg = t->cfg;
    int64_t rows_per_step = (int64_t)t->micro_batch * t->grad_accum * t->dist_world; /* the global batch */
    if (t->cursor + rows_per_step > t->train.n_rows) { /* epoch done: drop the remainder, reshuffle */
        t->epoch++;
        t->cursor = 0;
        make_epoch_order(t);
    }
    int64_t counted = 0;
    for (int64_t i = 0; i < rows_per_step; i++)
        counted += qlt_batch_count_targets(t->train.labels + (size_t)t->order[t->cursor + i] * t->seq, 1, t->seq);
    /* Adam's step count and the bias corrections are the device's (qlt_optim_guard): a skipped step does not
     * count, and the host learns of it only a step later in graph mode */
    *s = (qlt_optim_scalars){
        .lr = (float)qlt_schedule_lr(&t->schedule, t->step),
        .beta1 = cfg->train.betas[0],
        .beta2 = cfg->train.betas[1],
        .eps = cfg->train.eps,
        .weight_decay = cfg->train.weight_decay,
        .max_grad_norm = cfg->train.max_grad_norm,
        .grad_scale = counted > 0 ? 1.0f / (float)counted : 0.0f,
    };
    for (int micro = 0; micro < t->grad_accum; micro++)
        t->stage_seeds[micro] = mix64(cfg->train.seed, (uint64_t)qlt_dp_global_micro(t->step, t->grad_accum,
                                                                                   t->dist_world, t->dist_rank, micro));
    *counted_out = counted;
}

/* The test hooks in the middle of step t->step + 1 (eager: after its first micro-batch's backward): a NaN in the
 * gradient, a device fault. */
static void inject_test_faults(qlt_trainer *t) {
    int64_t step = t->step + 1;
    if (t->test_nan_step > 0 && step >= t->test_nan_step && step <= t->test_nan_last) {
        float nan = NAN;
        t->be->upload(t->be, t->lora.grads, &nan, sizeof nan);
    }
    if (t->test_fault_step == step && t->be->fault_inject) t->be->fault_inject(t->be, t->test_fault_sticky);
}

/* The device work of one step: zero the LoRA gradients, forward + backward of every micro-batch, the
 * global gradient norm and AdamW. With `staged`, micro-batch i reads batch buffer i (already sent);
 * otherwise each micro-batch is staged and sent into buffer 0 first (eager). */
static void enqueue_step_body(qlt_trainer *t, int staged) {
    qlt_backend *be = t->be;
    be->zero(be, t->lora.grads, sizeof(float) * (size_t)t->lora.n_params);
    for (int micro = 0; micro < t->grad_accum; micro++) {
        qlt_batch_buffers *bb = &t->bbs[staged ? micro : 0];
        if (!staged) {
            if (be->phase) be->phase(be, QLT_PHASE_OTHER);
            stage_rows(t, &t->train, t->order,
                       qlt_dp_micro_first_row(t->cursor, t->micro_batch, t->grad_accum, t->dist_rank, micro));
            qlt_batch_upload(bb, be, t->stage_ids, t->stage_labels, t->stage_seg);
        }
        qlt_forward_opts o = {.lora = &t->lora, .train = 1, .dropout_seed = t->dropout_seeds + micro,
                              .scalars = t->scalars, .loss_scratch = t->loss_scratch,
                              .recompute = t->checkpointing ? &t->recompute : NULL};
        qlt_graph_begin(&t->graph, 0);
        qlt_forward(&t->graph, &t->model, &bb->dev, &o);
        qlt_graph_backward(&t->graph);
        if (micro == 0 && !staged) inject_test_faults(t);
    }
    if (qlt_dp_reduce_step(t) != 0) t->comm->abort(t->comm, qlt_error()); /* data parallel: the global sums */
    if (be->phase) be->phase(be, QLT_PHASE_OPTIMIZER);
    be->grad_norm_sq(be, t->scalars, t->lora.grads, t->lora.n_params);
    be->adamw(be, t->lora.params, t->lora.grads, t->lora.m, t->lora.v, t->lora.n_params, t->scalars);
    if (be->phase) be->phase(be, QLT_PHASE_OTHER);
}

/* Fills *out from the scalars a step left and the host-side facts recorded when it was enqueued. */
static int fill_metrics(qlt_step_metrics *out, const qlt_optim_scalars *s, const qlt_step_metrics *rec) {
    *out = *rec;
    out->loss = rec->counted > 0 ? s->loss_sum / (double)rec->counted : 0.0;
    out->grad_norm = sqrt((double)s->grad_norm_sq);
    out->valid = 1;
    out->skipped = s->skip != 0;
    out->skipped_steps = s->skipped_steps;
    out->bad_streak = s->bad_streak;
    /* step 1 runs before any update (a fresh adapter adds 0): a non-finite loss there is the model's, or
     * lora.init_from's adapter's, not the learning rate's */
    if (!isfinite(out->loss) && out->step == 1)
        return qlt_fail("step 1: the loss is %g before any update: the model (or the lora.init_from adapter) gives "
                        "non-finite values; `qlora-train inspect MODEL_DIR --check` names tensors holding NaN or "
                        "infinity", out->loss);
    return 0; /* a later non-finite step was skipped on the device; train.max_bad_steps in a row stop the run */
}

/* What the host knows of step t->step when it is enqueued (the device fills loss and norm). */
static qlt_step_metrics step_record(const qlt_trainer *t, const qlt_optim_scalars *s, int64_t counted) {
    qlt_step_metrics r = {0};
    r.step = t->step + 1;
    r.lr = s->lr;
    r.tokens = (int64_t)t->micro_batch * t->grad_accum * t->dist_world * t->seq;
    r.counted = counted;
    r.tokens_seen = t->tokens_seen + r.tokens;
    r.epoch = (double)t->epoch +
              (double)(t->cursor + (int64_t)t->micro_batch * t->grad_accum * t->dist_world) / (double)t->train.n_rows;
    return r;
}

/* Waits for the step enqueued in slot and returns its metrics (its time: since the previous completion). */
static int flush_slot(qlt_trainer *t, qlt_step_metrics *out, int slot) {
    t->be->event_wait(t->be, QLT_EVENT_DONE0 + slot);
    double done = qlt_now_seconds();
    qlt_step_metrics rec = t->in_flight[slot];
    rec.seconds = done - (t->last_done > rec.seconds ? t->last_done : rec.seconds);
    t->last_done = done;
    return fill_metrics(out, &t->pinned->back[slot], &rec);
}

/* Graph mode: every per-step value is sent (asynchronously, from pinned memory) before the replay of the
 * step captured once; the step's scalars come back asynchronously and are read one step later, so the
 * host never waits inside a step and always has the next step queued behind the running one. */
static int graph_step(qlt_trainer *t, qlt_step_metrics *out) {
    qlt_backend *be = t->be;
    qlt_optim_scalars s;
    int64_t counted;
    if (t->step_in_flight) be->event_wait(be, QLT_EVENT_SENT); /* staging buffers free again */
    prepare_step(t, &s, &counted);
    for (int micro = 0; micro < t->grad_accum; micro++) {
        stage_rows(t, &t->train, t->order,
                   qlt_dp_micro_first_row(t->cursor, t->micro_batch, t->grad_accum, t->dist_rank, micro));
        qlt_batch_stage(&t->bbs[micro], t->stage_ids, t->stage_labels, t->stage_seg);
        qlt_batch_send(&t->bbs[micro], be, 1);
    }
    t->pinned->send = s;
    memcpy(t->pinned_seeds, t->stage_seeds, sizeof(uint64_t) * (size_t)t->grad_accum);
    be->upload_async(be, t->scalars, &t->pinned->send, QLT_OPTIM_HOST_BYTES); /* not the device's counters */
    be->upload_async(be, t->dropout_seeds, t->pinned_seeds, sizeof(uint64_t) * (size_t)t->grad_accum);
    be->event_record(be, QLT_EVENT_SENT);
    if (t->test_fault_step == t->step + 1 && be->fault_inject) be->fault_inject(be, t->test_fault_sticky);
    if (be->fault_state && be->fault_state(be, NULL, 0) != QLT_FAULT_NONE) { /* a captured step would run AdamW */
        out->valid = 0;
        return 0;
    }
    if (!t->step_graph) { /* the first step is captured, then replayed like every later one */
        QLT_TRY(be->capture_begin(be));
        enqueue_step_body(t, 1);
        QLT_TRY(be->capture_end(be, &t->step_graph));
    }
    QLT_TRY(be->graph_launch(be, t->step_graph));
    int slot = (int)(t->step % 2);
    be->download_async(be, &t->pinned->back[slot], t->scalars, sizeof s);
    be->event_record(be, QLT_EVENT_DONE0 + slot);
    t->in_flight[slot] = step_record(t, &s, counted);
    t->in_flight[slot].seconds = qlt_now_seconds();
    t->cursor += (int64_t)t->micro_batch * t->grad_accum * t->dist_world;
    t->tokens_seen += t->in_flight[slot].tokens;
    t->step++;
    out->valid = 0;
    int had_previous = t->step_in_flight;
    t->step_in_flight = 1;
    if (!had_previous) return 0;
    return flush_slot(t, out, 1 - slot);
}

int qlt_trainer_flush(qlt_trainer *t, qlt_step_metrics *out) {
    out->valid = 0;
    if (!t->step_graph || !t->step_in_flight) return 0;
    t->step_in_flight = 0;
    return flush_slot(t, out, (int)((t->step - 1) % 2));
}

static int eager_step(qlt_trainer *t, qlt_step_metrics *out) {
    qlt_backend *be = t->be;
    double t0 = qlt_now_seconds();
    qlt_optim_scalars s;
    int64_t counted;
    prepare_step(t, &s, &counted);
    be->upload(be, t->scalars, &s, QLT_OPTIM_HOST_BYTES); /* not the device's counters */
    be->upload(be, t->dropout_seeds, t->stage_seeds, sizeof(uint64_t) * (size_t)t->grad_accum);
    enqueue_step_body(t, 0);
    QLT_TRY(qlt_dp_wait(t)); /* data parallel: a dead rank ends this one in bounded time */
    qlt_step_metrics rec = step_record(t, &s, counted);
    be->download(be, &s, t->scalars, sizeof s);
    t->cursor += (int64_t)t->micro_batch * t->grad_accum * t->dist_world;
    t->tokens_seen = rec.tokens_seen;
    t->step++;
    rec.seconds = qlt_now_seconds() - t0;
    return fill_metrics(out, &s, &rec);
}

int qlt_trainer_step(qlt_trainer *t, qlt_step_metrics *out) {
    if (!t->graph_mode) return eager_step(t, out);
    /* the weights kept dequantized (train.dequant_cache_gib) are made outside any capture: a run's first step
     * runs eagerly and makes them, the step after it is captured and replayed */
    if (!t->step_graph && !t->step_in_flight && t->be->dequant_cache_bytes > 0 && !t->eager_first_done) {
        t->eager_first_done = 1;
        return eager_step(t, out);
    }
    return graph_step(t, out);
}

int64_t qlt_trainer_eval_batches(const qlt_trainer *t, const qlt_dataset *ds) {
    return (ds->n_rows + t->micro_batch - 1) / t->micro_batch;
}

int qlt_trainer_evaluate(qlt_trainer *t, const qlt_dataset *ds, double *loss, int64_t *counted_out) {
    qlt_backend *be = t->be;
    qlt_optim_scalars s = {0};
    be->upload(be, t->scalars, &s, QLT_OPTIM_HOST_BYTES); /* loss_sum 0; the optimizer's counters stay */
    int64_t counted = 0;
    for (int64_t first = 0; first < ds->n_rows; first += t->micro_batch) {
        if (!qlt_dp_eval_owns(first / t->micro_batch, t->dist_rank, t->dist_world)) continue; /* another rank's */
        stage_rows(t, ds, NULL, first);
        counted += qlt_batch_upload(&t->bbs[0], be, t->stage_ids, t->stage_labels, t->stage_seg);
        qlt_forward_opts o = {.lora = t->has_lora ? &t->lora : NULL, .train = 0, .scalars = t->scalars,
                              .loss_scratch = t->loss_scratch, .recompute = t->checkpointing ? &t->recompute : NULL};
        qlt_graph_begin_plan(&t->graph, 0, QLT_PLAN_EVAL);
        qlt_forward(&t->graph, &t->model, &t->bbs[0].dev, &o);
        if (t->eval_progress)
            t->eval_progress(t->eval_progress_ctx, first / t->micro_batch + 1, qlt_trainer_eval_batches(t, ds));
    }
    be->download(be, &s, t->scalars, sizeof s);
    if (t->dist_world > 1) { /* data parallel: the sums over every rank's share */
        double sums[2] = {s.loss_sum, (double)counted};
        QLT_TRY(qlt_dp_sum_host(t, sums, 2));
        s.loss_sum = (float)sums[0];
        counted = (int64_t)sums[1];
    }
    if (counted == 0) return qlt_fail("evaluation data has no tokens with labels (every label is -100)");
    *loss = s.loss_sum / (double)counted;
    if (counted_out) *counted_out = counted;
    return 0;
}

static char *checkpoint_dir(const qlt_trainer *t, int64_t step) {
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%lld", (long long)step);
    return qlt_path_join(t->cfg->output.dir, name);
}

/* A finished step into the run's logs and progress (src/train/run_log.c), and its skip counts into t. */
static void report_step(qlt_run_log *log, qlt_trainer *t, const qlt_step_metrics *m) {
    if (!m->valid) return;
    qlt_run_log_step(log, m);
    t->skipped_steps = m->skipped_steps;
    t->bad_streak = m->bad_streak;
    if (!m->skipped) t->last_good_step = m->step;
}

/* train.max_bad_steps skipped steps in a row: the adapter and AdamW state are still those of the last good step
 * (no skipped step changed them); they are saved with the progress so far, and the run stops. */
static int stop_after_bad_steps(qlt_trainer *t, qlt_run_log *metrics) {
    qlt_step_metrics m;
    QLT_TRY(qlt_trainer_flush(t, &m)); /* graph mode: the step still in flight */
    report_step(metrics, t, &m);
    char *dir = checkpoint_dir(t, t->step);
    int rc = qlt_checkpoint_save(t, dir);
    if (rc == 0) qlt_run_log_saved(metrics, t->step, dir);
    if (rc == 0)
        rc = qlt_fail("step %lld: %lld steps in a row had a non-finite loss or gradient norm (train.max_bad_steps %d; "
                      "%lld skipped in all): stopped; %s holds the adapter and optimizer state of step %lld, the last "
                      "good one: lower train.lr, check the data, or raise train.max_bad_steps, then --resume auto",
                      (long long)t->step, (long long)t->bad_streak, t->cfg->train.max_bad_steps,
                      (long long)t->skipped_steps, dir, (long long)t->last_good_step);
    free(dir);
    return rc;
}

/* After a step was enqueued: a device error recorded meanwhile (fault_unwind) ends the run. A recoverable one left
 * the optimizer state of the step before it (its grad_norm_sq and adamw did nothing), which is saved as that
 * step's checkpoint; after a sticky one nothing can be read back, and the last checkpoint stays as it is. */
static int handle_device_fault(qlt_trainer *t, qlt_run_log *metrics) {
    char msg[256];
    int state = t->be->fault_state ? t->be->fault_state(t->be, msg, sizeof msg) : QLT_FAULT_NONE;
    if (state == QLT_FAULT_NONE) return 0;
    int64_t failed = t->before_step.step + 1;
    if (state == QLT_FAULT_STICKY) {
        char *latest = qlt_checkpoint_find_latest(t->cfg->output.dir);
        int rc = latest ? qlt_fail("step %lld: %s device error: %s; the device is unusable (a sticky error: nothing "
                                   "can be read back from it, nothing saved): the last checkpoint, %s, is kept: "
                                   "check the device (nvidia-smi), then --resume auto", (long long)failed,
                                   t->be->name, msg, latest)
                        : qlt_fail("step %lld: %s device error: %s; the device is unusable (a sticky error: nothing "
                                   "can be read back from it) and no checkpoint was written before it: check the "
                                   "device (nvidia-smi) and start the run again", (long long)failed, t->be->name, msg);
        free(latest);
        return rc;
    }
    t->step = t->before_step.step; /* the failed step never happened */
    t->epoch = t->before_step.epoch;
    t->cursor = t->before_step.cursor;
    t->tokens_seen = t->before_step.tokens_seen;
    t->step_in_flight = 0;
    char *dir = checkpoint_dir(t, t->step);
    int rc = qlt_checkpoint_save(t, dir);
    if (rc == 0) {
        qlt_run_log_saved(metrics, t->step, dir);
        rc = qlt_fail("step %lld: %s device error: %s; the device's memory is still readable: %s holds the adapter "
                      "and optimizer state after step %lld: free the device's memory (or lower train.micro_batch), "
                      "then --resume auto", (long long)failed, t->be->name, msg, dir, (long long)t->step);
    } else {
        rc = qlt_fail_context("step %lld: %s device error: %s; saving the state after step %lld failed",
                              (long long)failed, t->be->name, msg, (long long)t->step);
    }
    free(dir);
    return rc;
}

static int run_eval_and_log(qlt_trainer *t, qlt_run_log *metrics) {
    double loss;
    int64_t counted;
    qlt_run_log_eval_begin(metrics, t->step, t->eval.n_rows, qlt_trainer_eval_batches(t, &t->eval));
    t->eval_progress = qlt_run_log_eval_progress;
    t->eval_progress_ctx = metrics;
    int rc = qlt_trainer_evaluate(t, &t->eval, &loss, &counted);
    t->eval_progress = NULL;
    if (rc != 0) return rc;
    if (isnan(t->eval_loss_first)) t->eval_loss_first = loss;
    t->eval_loss_last = loss;
    qlt_run_log_eval(metrics, t->step, loss, counted);
    return qlt_run_after_eval(t, loss);
}

/* output.sample_prompt answered by the model as it is now (greedy), printed and appended to samples.jsonl. */
static int sample_answer(qlt_trainer *t, const char *when) {
    const qlt_config *cfg = t->cfg;
    qlt_rng rng;
    qlt_rng_seed(&rng, cfg->train.seed);
    qlt_generation g;
    QLT_TRY(qlt_generate(&t->model, t->has_lora ? &t->lora : NULL, t->sample_tok, &t->sample_opts,
                         cfg->output.sample_prompt, &rng, NULL, &g));
    fprintf(stderr, "qlora-train: the sample prompt answered %s (step %lld):\n%s\n", when, (long long)t->step, g.text);
    char *path = qlt_path_join(cfg->output.dir, "samples.jsonl");
    FILE *f = fopen(path, t->step == 0 ? "w" : "a");
    int rc = 0;
    if (!f) {
        rc = qlt_fail("%s: cannot write", path);
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", (double)t->step);
        cJSON_AddStringToObject(o, "prompt", cfg->output.sample_prompt);
        cJSON_AddStringToObject(o, "completion", g.text);
        char *line = cJSON_PrintUnformatted(o);
        fprintf(f, "%s\n", line);
        free(line);
        cJSON_Delete(o);
        if (fclose(f) != 0) rc = qlt_fail("%s: write failed", path);
    }
    free(path);
    qlt_generation_free(&g);
    return rc;
}

int qlt_trainer_run(qlt_trainer *t, const char *resume) {
    const qlt_config *cfg = t->cfg;
    QLT_TRY(qlt_mkdirs(cfg->output.dir));
    QLT_TRY(qlt_run_begin(t));
    if (resume) {
        char *dir = strcmp(resume, "auto") == 0 ? qlt_checkpoint_find_latest(cfg->output.dir) : qlt_xstrdup(resume);
        if (dir) {
            if (qlt_checkpoint_load(t, dir) != 0) {
                free(dir);
                return -1;
            }
            make_epoch_order(t);
            fprintf(stderr, "qlora-train: resumed from %s at step %lld\n", dir, (long long)t->step);
            free(dir);
        } else {
            fprintf(stderr, "qlora-train: no checkpoint in %s: starting from step 0\n", cfg->output.dir);
        }
    }
    /* metrics.jsonl / .csv, TensorBoard, progress: a fresh run starts fresh logs; a resumed run keeps the lines
     * of the steps it resumed after */
    qlt_run_log *metrics = qlt_dp_is_root(t) ? qlt_run_log_open(cfg, t->be, t->step, t->total_steps)
                                             : qlt_run_log_open_quiet(cfg); /* data parallel: rank 0 logs */
    if (!metrics) return -1;
    fprintf(stderr, "qlora-train: %s backend, %lld trainable parameters, %lld rows of %d tokens, %lld steps\n",
            t->be->name, (long long)t->lora.n_params, (long long)t->train.n_rows, t->seq, (long long)t->total_steps);
    int rc = 0;
    if (t->step == 0 && cfg->train.eval_at_start && t->eval.n_rows > 0) rc = run_eval_and_log(t, metrics);
    if (rc == 0 && t->step == 0 && t->sample_tok && qlt_dp_is_root(t)) rc = sample_answer(t, "before training");
    qlt_step_metrics m;
    while (t->step < t->total_steps && rc == 0) {
        t->before_step.step = t->step;
        t->before_step.epoch = t->epoch;
        t->before_step.cursor = t->cursor;
        t->before_step.tokens_seen = t->tokens_seen;
        rc = qlt_trainer_step(t, &m);
        /* a device error first: what the failed step read back (its metrics) is not to be trusted */
        int fault_rc = handle_device_fault(t, metrics);
        if (fault_rc != 0) rc = fault_rc;
        if (rc != 0) break;
        report_step(metrics, t, &m);
        if (cfg->train.max_bad_steps > 0 && t->bad_streak >= cfg->train.max_bad_steps) {
            rc = stop_after_bad_steps(t, metrics);
            break;
        }
        int stop_signal = qlt_run_signal_caught(); /* SIGINT / SIGTERM: a checkpoint now, then stop */
        if (t->dist_world > 1 && qlt_dp_any(t, stop_signal) && !stop_signal) stop_signal = SIGTERM; /* all ranks */
        int want_eval = t->eval.n_rows > 0 && cfg->train.eval_every > 0 && t->step % cfg->train.eval_every == 0;
        int want_save = (cfg->output.save_every > 0 && t->step % cfg->output.save_every == 0) || stop_signal;
        if (want_eval || want_save) { /* graph mode: the step's own metrics first */
            rc = qlt_trainer_flush(t, &m);
            report_step(metrics, t, &m);
            if (rc == 0 && cfg->train.max_bad_steps > 0 && t->bad_streak >= cfg->train.max_bad_steps) {
                rc = stop_after_bad_steps(t, metrics);
                break;
            }
        }
        if (rc == 0 && want_eval) rc = run_eval_and_log(t, metrics);
        if (rc == 0 && (want_save || t->run.early_stopped)) {
            char *dir = checkpoint_dir(t, t->step);
            rc = qlt_checkpoint_save(t, dir);
            if (rc == 0) qlt_run_log_saved(metrics, t->step, dir);
            free(dir);
            if (rc == 0 && qlt_dp_is_root(t)) rc = qlt_checkpoint_prune(cfg->output.dir, cfg->output.keep_last);
        }
        if (rc == 0 && qlt_run_should_stop(t, stop_signal)) break;
    }
    if (t->run.stop_signal) { /* interrupted: no final adapter, the checkpoint continues it */
        qlt_run_log_close(metrics, rc == 0); /* the loss plot of the steps so far */
        return rc;
    }
    if (rc == 0) {
        rc = qlt_trainer_flush(t, &m);
        report_step(metrics, t, &m);
    }
    if (rc == 0) rc = handle_device_fault(t, metrics);
    if (rc == 0 && t->eval.n_rows > 0 && !(cfg->train.eval_every > 0 && t->step % cfg->train.eval_every == 0))
        rc = run_eval_and_log(t, metrics);
    const int plotted = qlt_run_log_close(metrics, rc == 0);
    if (rc == 0 && t->sample_tok && qlt_dp_is_root(t)) rc = sample_answer(t, "after training");
    if (rc != 0) return rc;
    char *final_dir = qlt_path_join(cfg->output.dir, "final");
    rc = qlt_adapter_save(t, final_dir);
    if (rc == 0 && qlt_dp_is_root(t)) fprintf(stderr, "qlora-train: adapter written to %s\n", final_dir);
    if (rc == 0 && !isnan(t->eval_loss_first) && t->eval_loss_first != t->eval_loss_last)
        fprintf(stderr, "qlora-train: eval loss %.4f -> %.4f (perplexity %.2f -> %.2f)\n", t->eval_loss_first,
                t->eval_loss_last, exp(t->eval_loss_first), exp(t->eval_loss_last));
    if (rc == 0 && plotted) {
        char *plot = qlt_path_join(cfg->output.dir, "loss.png");
        fprintf(stderr, "qlora-train: loss plot in %s\n", plot);
        free(plot);
    }
    if (rc == 0 && t->sample_tok)
        fprintf(stderr, "qlora-train: both answers are in %s/samples.jsonl; ask more with `qlora-train generate "
                        "--config CONFIG --adapter %s --prompt ...`\n", cfg->output.dir, final_dir);
    free(final_dir);
    return rc;
}

void qlt_trainer_free(qlt_trainer *t) {
    qlt_backend *be = t->be;
    if (be) {
        qlt_graph_free(&t->graph);
        qlt_graph_free(&t->recompute);
        for (int i = 0; i < t->n_bbs; i++) qlt_batch_buffers_free(&t->bbs[i], be);
        if (t->step_graph) be->graph_free(be, t->step_graph);
        if (t->pinned) be->host_free(be, t->pinned);
        if (t->pinned_seeds) be->host_free(be, t->pinned_seeds);
        if (t->scalars) be->free(be, t->scalars);
        if (t->dropout_seeds) be->free(be, t->dropout_seeds);
        if (t->loss_scratch) be->free(be, t->loss_scratch);
        if (t->has_lora) qlt_lora_free(&t->lora);
        if (t->model_loaded) qlt_model_free(&t->model);
        qlt_dp_close(t); /* before the backend: NCCL runs on its stream */
    }
    qlt_dataset_free(&t->train);
    qlt_dataset_free(&t->eval);
    if (t->sample_tok) qlt_tokenizer_free(t->sample_tok);
    free(t->stage_ids);
    free(t->stage_labels);
    free(t->stage_seg);
    free(t->stage_seeds);
    free(t->bbs);
    free(t->order);
    if (be) be->destroy(be);
    memset(t, 0, sizeof *t);
}
