/* data_parallel.h: the trainer's side of data parallel training (docs/DISTRIBUTED.md). A step's global batch
 * is micro_batch x grad_accum x world rows of the epoch's row order from the cursor: rank r reads the
 * grad_accum micro-batches r*grad_accum .. r*grad_accum + grad_accum-1 of it, i.e. the global micro-batch
 * g = r*grad_accum + m is what a one-process run with grad_accum x world micro-batches reads as its g-th, with
 * the same dropout seed. Each rank's loss gradient is scaled by 1 / (labelled tokens of the whole global batch),
 * so the all-reduced sum of the ranks' LoRA gradients is the one-process gradient; grad norm, clipping, AdamW
 * and the skip decision then run on identical values on every rank. */
#ifndef QLT_DATA_PARALLEL_H
#define QLT_DATA_PARALLEL_H

#include <stdint.h>

#include "dist/comm.h"
#include "train/trainer.h"

/* The position in the epoch's row order of the first row of micro-batch `micro` (0 .. grad_accum-1) of `rank`
 * in the step whose global batch starts at `cursor`. */
int64_t qlt_dp_micro_first_row(int64_t cursor, int micro_batch, int grad_accum, int rank, int micro);
/* The global index of that micro-batch among all micro-batches of the run (its dropout seed's counter). */
int64_t qlt_dp_global_micro(int64_t step, int grad_accum, int world, int rank, int micro);
/* Evaluation: rank `rank` of `world` scores eval micro-batch `batch` (round robin). */
int qlt_dp_eval_owns(int64_t batch, int rank, int world);

/* From the environment (comm.h): world 1 leaves t->comm NULL; else opens MPI (under mpirun, CPU backend) or
 * NCCL (CUDA backend) and sets t->dist_rank / t->dist_world. The GPU of this rank: qlt_dp_gpu_index. */
int qlt_dp_open(qlt_trainer *t);
/* LOCAL_RANK (the GPU this process uses) when a data parallel launcher set it, else 0. */
int qlt_dp_gpu_index(void);
/* After the backward of a step: the LoRA gradients and the step's loss sum, summed over the ranks. */
int qlt_dp_reduce_step(qlt_trainer *t);
/* Waits (bounded: train.dist_timeout_s) for the step's collectives; 0 without data parallel. */
int qlt_dp_wait(qlt_trainer *t);
/* values [n] of this rank (host) := their sums over the ranks. */
int qlt_dp_sum_host(qlt_trainer *t, double *values, int n);
/* 1 when flag is nonzero on any rank (every rank gets the same answer). */
int qlt_dp_any(qlt_trainer *t, int flag);
/* Rank 0 (or no data parallel): the rank that writes checkpoints, logs and metrics. */
int qlt_dp_is_root(const qlt_trainer *t);
void qlt_dp_close(qlt_trainer *t);

#endif
