/* schedule.c: see schedule.h. */
#include "optim/schedule.h"

#include <math.h>
#include <string.h>

void qlt_schedule_init(qlt_schedule *s, qlt_schedule_kind kind, double base_lr, int64_t total_steps,
                       int64_t warmup_steps, double warmup_ratio, double min_lr_ratio) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->base_lr = base_lr;
    s->total_steps = total_steps;
    s->warmup_steps = warmup_steps > 0 ? warmup_steps : (int64_t)ceil(warmup_ratio * (double)total_steps);
    s->min_lr_ratio = min_lr_ratio;
}

double qlt_schedule_lr(const qlt_schedule *s, int64_t k) {
    int64_t w = s->warmup_steps, t = s->total_steps;
    double lambda;
    if (k < w) {
        lambda = (double)k / (double)(w > 1 ? w : 1);
    } else if (s->kind == QLT_SCHEDULE_CONSTANT) {
        lambda = 1.0;
    } else {
        double span = (double)(t - w > 1 ? t - w : 1);
        if (s->kind == QLT_SCHEDULE_LINEAR) {
            lambda = (double)(t - k) / span;
            if (lambda < 0) lambda = 0;
        } else {
            double progress = (double)(k - w) / span;
            if (progress > 1) progress = 1;
            lambda = 0.5 * (1.0 + cos(M_PI * progress));
        }
        lambda = s->min_lr_ratio + (1.0 - s->min_lr_ratio) * lambda;
    }
    return s->base_lr * lambda;
}
