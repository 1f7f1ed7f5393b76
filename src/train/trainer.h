/* trainer.h: the training loop: data order (seeded shuffle per epoch), gradient accumulation with the
 * loss normalized over every counted token of the optimizer step (as HF Trainer does), global-norm
 * clipping and AdamW on the backend, the LR schedule, metrics.jsonl, evaluation, checkpoints and exact
 * resume. The same code drives the CPU reference and CUDA backends. */
#ifndef QLT_TRAINER_H
#define QLT_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "autograd/graph.h"
#include "io/config.h"
#include "io/dataset.h"
#include "model/lora.h"
#include "model/model.h"
#include "optim/schedule.h"
#include "train/batch.h"

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
    qlt_batch_buffers bb;
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
} qlt_trainer;

typedef struct qlt_step_metrics {
    double loss;      /* mean over counted tokens of the step */
    double grad_norm; /* before clipping */
    double lr;
    int64_t tokens;   /* token positions processed by the step (micro_batch * seq * grad_accum) */
    int64_t counted;  /* tokens that carried a loss */
    double seconds;
} qlt_step_metrics;

/* What to set up: training (model + adapter + optimizer + datasets) or evaluation only. */
typedef enum qlt_trainer_mode { QLT_TRAINER_TRAIN = 0, QLT_TRAINER_EVAL } qlt_trainer_mode;

int qlt_trainer_init(qlt_trainer *t, const qlt_config *cfg, qlt_trainer_mode mode);
/* One optimizer step over grad_accum micro-batches. */
int qlt_trainer_step(qlt_trainer *t, qlt_step_metrics *m);
/* Mean loss over every counted token of ds (no gradients). */
int qlt_trainer_evaluate(qlt_trainer *t, const qlt_dataset *ds, double *loss, int64_t *counted);
/* The whole run: resume (NULL, "auto" or a dir), steps, metrics, checkpoints, final adapter. */
int qlt_trainer_run(qlt_trainer *t, const char *resume);
void qlt_trainer_free(qlt_trainer *t);

#endif
