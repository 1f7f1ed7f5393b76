/* backend_cpu.h: the CPU reference backend's constructor (the ops themselves are reached through the
 * qlt_backend table, and directly through cpu_ops.h by the GPU checks). */
#ifndef QLT_BACKEND_CPU_H
#define QLT_BACKEND_CPU_H

#include "backend/backend.h"

/* The CPU reference backend (always available). threads = 0: all cores. */
qlt_backend *qlt_backend_cpu_create(int threads);

#endif
