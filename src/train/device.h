/* device.h: which backend a run gets from train.device (auto | cpu | cuda). It sits above the backends (it
 * knows both) so that the backend table itself knows none of them. */
#ifndef QLT_DEVICE_H
#define QLT_DEVICE_H

#include "backend/backend.h"
#include "config/config.h"

/* train.device -> a backend, or NULL with qlt_fail; auto prefers CUDA and says on stderr, in one line, when
 * no GPU was found and the CPU is used. threads: the CPU backend's (0: all cores); cpu_reference: the CPU
 * backend's reference ops (train.cpu_reference). */
qlt_backend *qlt_device_backend_create(qlt_device device, int threads, int cpu_reference);
/* The same on GPU gpu_index (data parallel: this rank's LOCAL_RANK) where the backend is CUDA. */
qlt_backend *qlt_device_backend_create_on(qlt_device device, int threads, int cpu_reference, int gpu_index);

#endif
