/* clock.h: the one monotonic wall clock every timing in the project reads (step times, load times, the
 * bench, the tokenizer's throughput, the CPU backend's phase profile, the GPU monitor and checks). */
#ifndef QLT_COMMON_CLOCK_H
#define QLT_COMMON_CLOCK_H

#include <time.h>

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC: never steps back with the system clock). */
static inline double qlt_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
