/* optim_guard.h: what grad_norm_sq does after summing the squares, shared word for word by the CPU backend
 * and the CUDA kernel (one thread) so both skip the same steps and form the same bias corrections: a step
 * whose loss or gradient norm is not finite is skipped (adamw leaves the adapter and both moments as they
 * are, and Adam's step count does not advance, so to the optimizer the step never happened; the data and
 * the learning-rate schedule still move on, as the host counts them). */
#ifndef QLT_OPTIM_GUARD_H
#define QLT_OPTIM_GUARD_H

#include <math.h>

#include "backend/backend.h"

#ifdef __CUDACC__
#define QLT_OPTIM_GUARD_FN __host__ __device__ static inline
#else
#define QLT_OPTIM_GUARD_FN static inline
#endif

/* s->grad_norm_sq is written; sets skip, the counters and (for a good step) the bias corrections of its
 * Adam step, in double as torch forms 1 - beta^step, rounded to float once. */
QLT_OPTIM_GUARD_FN void qlt_optim_guard(qlt_optim_scalars *s) {
    if (!isfinite(s->loss_sum) || !isfinite(s->grad_norm_sq)) {
        s->skip = 1;
        s->bad_streak++;
        s->skipped_steps++;
        return;
    }
    s->skip = 0;
    s->bad_streak = 0;
    s->adam_step++;
    s->bias_correction1 = (float)(1.0 - pow((double)s->beta1, (double)s->adam_step));
    s->bias_correction2 = (float)(1.0 - pow((double)s->beta2, (double)s->adam_step));
}

#endif
