/* backend_cpu.h: the CPU backend's constructor (the ops themselves are reached through the qlt_backend
 * table, and directly through cpu_ops.h / cpu_fast.h by tests and the GPU checks). */
#ifndef QLT_BACKEND_CPU_H
#define QLT_BACKEND_CPU_H

#include "backend/backend.h"

/* The CPU backend (always available). threads = 0: all cores (OpenBLAS gets the same count). reference = 1:
 * the reference ops (cpu_ops.h: double sums, what the float64 goldens are checked with; train.cpu_reference),
 * 0: the default mode (cpu_fast.h: float32 through OpenBLAS and vectorized loops). */
qlt_backend *qlt_backend_cpu_create(int threads, int reference);

#endif
