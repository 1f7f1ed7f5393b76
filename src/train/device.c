/* device.c: picks the backend for train.device (see device.h). */
#include "train/device.h"

#include <stdio.h>

#include "common/error.h"
#include "cpu/backend_cpu.h"
#ifdef QLT_HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

qlt_backend *qlt_device_backend_create(qlt_device device, int threads, int cpu_reference) {
    return qlt_device_backend_create_on(device, threads, cpu_reference, 0);
}

qlt_backend *qlt_device_backend_create_on(qlt_device device, int threads, int cpu_reference, int gpu_index) {
    if (device == QLT_DEVICE_CPU) return qlt_backend_cpu_create(threads, cpu_reference);
    if (device == QLT_DEVICE_CUDA) {
#ifdef QLT_HAVE_CUDA
        return qlt_backend_cuda_create(gpu_index);
#else
        (void)gpu_index;
        qlt_fail("this build has no CUDA backend (nvcc was not found when it was built): use --set train.device=cpu, "
                 "or rebuild with the CUDA toolkit installed");
        return NULL;
#endif
    }
    if (device == QLT_DEVICE_AUTO) {
#ifdef QLT_HAVE_CUDA
        /* asked quietly first: a machine without a GPU (or without a driver) is told so in plain words, not
         * with CUDA's "driver version is insufficient" */
        if (qlt_cuda_device_count() == 0) {
            fprintf(stderr, "qlora-train: no GPU found: using the CPU\n");
        } else {
            qlt_backend *be = qlt_backend_cuda_create(gpu_index);
            if (be) return be;
            fprintf(stderr, "qlora-train: the GPU cannot be used (%s): using the CPU\n", qlt_error());
        }
#else
        fprintf(stderr, "qlora-train: no GPU backend in this build (built without CUDA): using the CPU\n");
#endif
        return qlt_backend_cpu_create(threads, cpu_reference);
    }
    qlt_fail("train.device = %d: not one of auto, cpu, cuda (e.g. --set train.device=auto)", (int)device);
    return NULL;
}
