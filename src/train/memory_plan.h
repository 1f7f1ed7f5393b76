/* memory_plan.h: the GPU memory a run will take, computed before anything is loaded, so that a run that does not
 * fit is refused at once, with the settings that would fit, instead of failing minutes later in the middle of
 * loading or at its first step. The plan builds the model's shapes, the adapter, the batch buffers and the
 * step's planned activation arena on the backend in planning mode (backend.h plan_begin): the same calls a run
 * makes, counted instead of made, so it follows the code rather than a formula. Backends without planning
 * (the CPU) have no plan. */
#ifndef QLT_MEMORY_PLAN_H
#define QLT_MEMORY_PLAN_H

#include "backend/backend.h"
#include "config/config.h"

/* Device memory a CUDA run takes besides what the plan counts: the kernels cuBLAS and cuDNN load on first use,
 * cuDNN's attention workspace (it depends on the plans cuDNN picks) and a captured step graph. Measured at
 * 0.15-0.27 GiB of libraries and up to 0.22 GiB of cuDNN workspace on the 1.5B, 7B and 72B shapes
 * (docs/RELIABILITY.md, "Memory"). */
#define QLT_PLAN_LIBRARY_BYTES ((size_t)512 << 20)

typedef struct qlt_memory_plan {
    int micro_batch, seq, checkpointing; /* the shape planned; checkpointing as resolved (auto: layer when needed) */
    /* bytes */
    double weights;     /* frozen weights as stored (NF4 or bf16), norms and biases included */
    double lora;        /* LoRA parameters, gradients and AdamW moments (16 bytes a parameter) */
    double activations; /* the step's planned activation arena (and the recomputed layer's with checkpointing) */
    double buffers;     /* everything else the run allocates: batch buffers, the loss scratch, the dequantization
                           scratch and LoRA workspaces, bias copies, the backend's fixed workspaces */
    double dequant_cache; /* train.dequant_cache_gib's weights kept dequantized, at most */
    double libraries;   /* QLT_PLAN_LIBRARY_BYTES on CUDA, 0 on the CPU */
    double total;       /* all of the above: the run's peak */
    double available;   /* free device memory when planned (the CUDA context already taken) */
    double in_use;      /* device memory the backend already held then (counted in total as buffers) */
    double context;     /* device memory in use then that the backend did not allocate (the CUDA context, other
                           processes); 0 when the backend cannot tell. A run takes device_used_bytes - context */
} qlt_memory_plan;

/* Plans cfg's run (train: 1 for training, 0 for evaluation) at micro_batch x seq with grad_checkpoint mode
 * ckpt_mode (QLT_GRAD_CHECKPOINT_*; auto: none when it fits, else layer), on be, which must plan
 * (be->plan_begin). 0, or -1 with qlt_fail (a model.path that cannot be read). */
int qlt_memory_plan_make(qlt_memory_plan *p, const qlt_config *cfg, qlt_backend *be, int train, int micro_batch,
                         int seq, int ckpt_mode);

/* 1 when the plan fits in the memory that was free. */
int qlt_memory_plan_fits(const qlt_memory_plan *p);

/* Plans the run as configured and refuses it, with qlt_fail naming the device, the plan's parts and up to three
 * settings that would fit (checked by planning them too), when it does not fit. Fills *p (the configured plan).
 * 0 when it fits (or be does not plan: p->total 0), -1 with qlt_fail otherwise. */
int qlt_memory_plan_check(qlt_memory_plan *p, const qlt_config *cfg, qlt_backend *be, int train);

/* One line: "X GiB of Y GiB free (weights .., LoRA + AdamW .., activations .. (checkpointing), buffers ..)". */
void qlt_memory_plan_describe(const qlt_memory_plan *p, char *buf, size_t size);

#endif
