/* device.c: picks the backend for train.device (see device.h). */
#include "train/device.h"

#include <stdio.h>

#include "common/error.h"
#include "cpu/backend_cpu.h"
#ifdef QLT_HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

qlt_backend *qlt_device_backend_create(qlt_device device, int threads, int cpu_reference) {
    if (device == QLT_DEVICE_CPU) return qlt_backend_cpu_create(threads, cpu_reference);
    if (device == QLT_DEVICE_CUDA) {
#ifdef QLT_HAVE_CUDA
        return qlt_backend_cuda_create(0);
#else
        qlt_fail("this build has no CUDA backend (nvcc was not found when it was built): use --set train.device=cpu, "
                 "or rebuild with the CUDA toolkit installed");
        return NULL;
#endif
    }
    if (device == QLT_DEVICE_AUTO) {
#ifdef QLT_HAVE_CUDA
        qlt_backend *be = qlt_backend_cuda_create(0);
        if (be) return be;
        fprintf(stderr, "qlora-train: no usable GPU, running on the CPU (%s)\n", qlt_error());
#else
        fprintf(stderr, "qlora-train: built without CUDA: running on the CPU\n");
#endif
        return qlt_backend_cpu_create(threads, cpu_reference);
    }
    qlt_fail("train.device = %d: not one of auto, cpu, cuda (e.g. --set train.device=auto)", (int)device);
    return NULL;
}
