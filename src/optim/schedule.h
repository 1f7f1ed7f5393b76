/* schedule.h: learning-rate schedules with Hugging Face `get_scheduler` semantics. Optimizer step k
 * (0-based: the k-th update) uses lr * lambda(k):
 *   warmup (k < W):  k / max(1, W)
 *   constant:        1
 *   linear:          max(0, (T - k) / max(1, T - W))
 *   cosine:          0.5 * (1 + cos(pi * progress)),  progress = (k - W) / max(1, T - W)
 * and with min_lr_ratio m > 0 the decaying part is m + (1 - m) * lambda. W = warmup_steps, or
 * ceil(warmup_ratio * T) when warmup_steps is 0. */
#ifndef QLT_SCHEDULE_H
#define QLT_SCHEDULE_H

#include <stdint.h>

typedef enum qlt_schedule_kind {
    QLT_SCHEDULE_CONSTANT = 0,
    QLT_SCHEDULE_LINEAR,
    QLT_SCHEDULE_COSINE,
} qlt_schedule_kind;

typedef struct qlt_schedule {
    qlt_schedule_kind kind;
    double base_lr;
    int64_t warmup_steps;
    int64_t total_steps;
    double min_lr_ratio;
} qlt_schedule;

void qlt_schedule_init(qlt_schedule *s, qlt_schedule_kind kind, double base_lr, int64_t total_steps,
                       int64_t warmup_steps, double warmup_ratio, double min_lr_ratio);
double qlt_schedule_lr(const qlt_schedule *s, int64_t step);

#endif
