/* backend_cpu.h: the CPU backend's constructor (the ops themselves are reached through the qlt_backend
 * table, and directly through cpu_ops.h / cpu_fast.h by tests and the GPU checks). */
#ifndef QLT_BACKEND_CPU_H
#define QLT_BACKEND_CPU_H

#include "backend/backend.h"

/* The CPU backend (always available). threads = 0: all cores (OpenBLAS gets the same count). reference = 1:
 * the reference ops (cpu_ops.h: double sums, what the float64 goldens are checked with; train.cpu_reference),
 * 0: the default mode (cpu_fast.h: float32 through OpenBLAS and vectorized loops). */
qlt_backend *qlt_backend_cpu_create(int threads, int reference);

/* The frozen-weight products the linear ops ran since profile_on (bench), and what OpenBLAS's sgemm alone
 * takes for the same shapes and number of calls (each shape timed now, the median of 5). */
typedef struct qlt_cpu_gemm_report {
    double flops;     /* of every product counted */
    double sgemm_ms;  /* sgemm alone on them */
    int64_t calls;
    int shapes;       /* distinct shapes */
    int threads;      /* the threads both ran on */
} qlt_cpu_gemm_report;
/* 0, or -1 with qlt_fail when the shapes were too many to keep. */
int qlt_backend_cpu_gemm_report(qlt_backend *be, qlt_cpu_gemm_report *out);

#endif
