/* forward.h: one forward pass of the decoder over a batch [batch, seq], recorded on the autograd tape,
 * ending in the fused lm_head + cross-entropy. In training mode the loss gradient w.r.t. the final
 * hidden state is produced by the fused loss itself, so qlt_graph_backward can run right after. */
#ifndef QLT_FORWARD_H
#define QLT_FORWARD_H

#include <stdint.h>

#include "autograd/graph.h"
#include "model/lora.h"
#include "model/model.h"

/* Token-level inputs of one micro-batch, in backend memory, each int32 [batch * seq]. */
typedef struct qlt_batch_dev {
    int batch, seq;
    int32_t *input_ids;
    int32_t *targets;   /* labels shifted left within each row: targets[t] = labels[t+1], -100 at row end */
    int32_t *positions; /* t - seg_start[t] */
    int32_t *seg_start;
    int max_position;    /* the largest of positions (host; LongRoPE picks its factors by it) */
    int window;          /* the model's sliding window the batch was staged for (0: none) */
    int32_t *seg_window; /* max(seg_start[t], t - window + 1): the first key a sliding-window layer's query t
                            sees (same example, causal, t - j < window); seg_start itself when window is 0.
                            It never decreases along a row, so the attention kernels take it as seg_start. */
} qlt_batch_dev;

typedef struct qlt_forward_opts {
    const qlt_lora *lora;   /* NULL: base model only */
    int train;              /* produce the loss gradient (needs lora) */
    const uint64_t *dropout_seed; /* backend memory: this micro-batch's seed (lora->dropout > 0) */
    qlt_optim_scalars *scalars;   /* backend memory: loss_sum +=, grad_scale read */
    void *loss_scratch;     /* backend memory: qlt_loss_scratch_bytes(model, N) */
    qlt_graph *recompute;   /* non-NULL: layer gradient checkpointing; each layer's activations live in this
                               graph only while the layer is computed, and are recomputed in the backward */
} qlt_forward_opts;

/* Records and runs the forward. Returns the value index of the final normed hidden state [N, hidden]. */
int qlt_forward(qlt_graph *g, const qlt_model *m, const qlt_batch_dev *b, const qlt_forward_opts *opts);
/* Bytes of loss scratch for n tokens. */
size_t qlt_loss_scratch_bytes(const qlt_model *m, int64_t n);

#endif
