/* trainer.h: the training loop: data order (seeded shuffle per epoch), gradient accumulation with the
 * loss normalized over every counted token of the optimizer step (as HF Trainer does), global-norm
 * clipping and AdamW on the backend, the LR schedule, metrics.jsonl, evaluation, checkpoints and exact
 * resume. The same code drives the CPU reference and CUDA backends. */
#ifndef QLT_TRAINER_H
#define QLT_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "autograd/graph.h"
#include "config/config.h"
#include "data/dataset.h"
#include "infer/generate.h"
#include "model/lora.h"
#include "model/model.h"
#include "optim/schedule.h"
#include "train/batch.h"
#include "train/memory_plan.h"
#include "train/run_control.h"

typedef struct qlt_step_metrics {
    int valid;        /* 0: no step finished yet (graph mode reports each step one call later) */
    int64_t step;     /* the optimizer step these numbers belong to (1-based) */
    double loss;      /* mean over counted tokens of the step */
    double grad_norm; /* before clipping */
    double lr;
    int64_t tokens;   /* token positions processed by the step (micro_batch * seq * grad_accum) */
    int64_t counted;  /* tokens that carried a loss */
    int64_t tokens_seen; /* after this step */
    double epoch;     /* fractional epoch after this step */
    double seconds;   /* wall time of the step (graph mode: between consecutive completions) */
    int skipped;      /* 1: its loss or gradient norm was not finite: the update was skipped */
    int64_t skipped_steps; /* steps skipped since the run began, this one included */
    int64_t bad_streak;    /* skipped steps in a row ending with this one */
} qlt_step_metrics;

/* CUDA graph mode's pinned host copies of the optimizer scalars. */
typedef struct qlt_pinned_scalars {
    qlt_optim_scalars send;    /* the next step's scalars, sent before its replay */
    qlt_optim_scalars back[2]; /* what the last two steps left (loss, gradient norm) */
} qlt_pinned_scalars;

enum { QLT_EVENT_SENT = 0, QLT_EVENT_DONE0 = 1 /* and 2 */ };

typedef struct qlt_trainer {
    const qlt_config *cfg;
    qlt_backend *be;
    qlt_model model;
    int model_loaded;
    qlt_lora lora;
    int has_lora;
    qlt_dataset train, eval;
    qlt_schedule schedule;
    qlt_graph graph;
    qlt_graph recompute;     /* gradient checkpointing: one layer's activations at a time */
    int checkpointing;       /* train.grad_checkpoint resolved: 1 = layer */
    qlt_memory_plan mem_plan; /* made before loading (total 0: the backend does not plan) */
    int attention_plan;      /* which attention runs: QLT_ATTENTION_* (backend.h) */
    qlt_batch_buffers *bbs;     /* [n_bbs]: one per micro-batch in graph mode, else one */
    int n_bbs;
    qlt_optim_scalars *scalars; /* backend memory */
    uint64_t *dropout_seeds;    /* backend memory [grad_accum]: one seed per micro-batch of a step */
    void *loss_scratch;         /* backend memory */
    int32_t *stage_ids, *stage_labels, *stage_seg; /* host [micro_batch, seq] */
    uint64_t *stage_seeds;                         /* host [grad_accum] */
    int micro_batch, grad_accum, seq;
    /* progress (what a checkpoint stores) */
    int64_t step;            /* optimizer steps done */
    int64_t total_steps;
    int64_t steps_per_epoch;
    int64_t epoch;           /* current epoch (0-based) */
    int64_t cursor;          /* next position in the epoch's row order */
    int64_t tokens_seen;
    int64_t *order;          /* [train.n_rows] row order of the current epoch */
    /* CUDA graph mode (train.cuda_graph or CUDA_GRAPH=1) */
    int graph_mode;
    void *step_graph;        /* the captured step, replayed every step */
    qlt_pinned_scalars *pinned;
    uint64_t *pinned_seeds;  /* [grad_accum] */
    int step_in_flight;      /* a step's metrics are still to be read */
    int eager_first_done;    /* train.dequant_cache_gib: the eager step before the capture has run */
    qlt_step_metrics in_flight[2];
    double last_done;
    /* output.sample_prompt: the tokenizer and how the prompt is put (chat user turn or raw) */
    qlt_tokenizer *sample_tok;
    qlt_generate_opts sample_opts;
    double eval_loss_first, eval_loss_last; /* this run's first and last eval losses (NAN: none yet) */
    qlt_run_state run;       /* best eval loss, early stopping, the signal that stopped the run */
    /* numerical and device faults (docs/RELIABILITY.md) */
    int64_t skipped_steps, bad_streak; /* as the latest metrics read back said */
    int64_t last_good_step;  /* the latest step whose update was applied (0: none) */
    struct {
        int64_t step, epoch, cursor, tokens_seen;
    } before_step;           /* the progress before the step being enqueued: what a device fault rolls back to */
    int64_t test_nan_step, test_nan_last; /* QLT_TEST_NAN_AT_STEP: steps test_nan_step..test_nan_last (0: off) */
    int64_t test_fault_step; /* QLT_TEST_DEVICE_FAULT (0: off) */
    int test_fault_sticky;
    /* called after each micro-batch of qlt_trainer_evaluate when set (the run's progress line; the eval
     * command's progress lines) */
    void (*eval_progress)(void *ctx, int64_t done, int64_t total);
    void *eval_progress_ctx;
    /* data parallel (data_parallel.h): the communicator (NULL: one process), this rank and the number of ranks */
    struct qlt_comm *comm;
    int dist_rank, dist_world;
} qlt_trainer;



/* What to set up: training (model + adapter + optimizer + datasets) or evaluation only. */
typedef enum qlt_trainer_mode { QLT_TRAINER_TRAIN = 0, QLT_TRAINER_EVAL } qlt_trainer_mode;

int qlt_trainer_init(qlt_trainer *t, const qlt_config *cfg, qlt_trainer_mode mode);
/* One optimizer step over grad_accum micro-batches. Eager: *m holds its metrics. Graph mode: the step is
 * enqueued and *m holds the previous step's metrics (m->valid 0 after the first step). */
int qlt_trainer_step(qlt_trainer *t, qlt_step_metrics *m);
/* Graph mode: waits for the last enqueued step and returns its metrics (m->valid 0 when none). */
int qlt_trainer_flush(qlt_trainer *t, qlt_step_metrics *m);
/* Micro-batches qlt_trainer_evaluate runs over ds. */
int64_t qlt_trainer_eval_batches(const qlt_trainer *t, const qlt_dataset *ds);
/* Mean loss over every counted token of ds (no gradients). */
int qlt_trainer_evaluate(qlt_trainer *t, const qlt_dataset *ds, double *loss, int64_t *counted);
/* The whole run: resume (NULL, "auto" or a dir), steps, metrics, checkpoints, final adapter. */
int qlt_trainer_run(qlt_trainer *t, const char *resume);
void qlt_trainer_free(qlt_trainer *t);
/* Activation bytes a pass of plan_id (QLT_PLAN_TRAIN: a training micro-step, QLT_PLAN_EVAL: a forward) needs with or
 * without layer checkpointing: a planning pass over t->model, t->lora and t->bbs[0] into t->graph and
 * t->recompute (re-initialized; nothing allocated). Also what the memory plan (memory_plan.c) measures. */
size_t qlt_trainer_measure_plan(qlt_trainer *t, int checkpointing, int plan_id);

#endif
