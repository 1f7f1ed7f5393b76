/* backend.c: picks the backend for train.device (auto | cpu | cuda). */
#include <stdio.h>
#include <string.h>

#include "common/backend.h"
#include "common/error.h"

#ifndef QLT_HAVE_CUDA
qlt_backend *qlt_backend_cuda_create(int device_index) {
    qlt_fail("this build has no CUDA backend (nvcc was not found when it was built): use --set train.device=cpu, "
             "or rebuild with the CUDA toolkit installed");
    return NULL;
}
#endif

qlt_backend *qlt_backend_create(const char *device, int threads) {
    if (strcmp(device, "cpu") == 0) return qlt_backend_cpu_create(threads);
    if (strcmp(device, "cuda") == 0) return qlt_backend_cuda_create(0);
    if (strcmp(device, "auto") == 0) {
#ifdef QLT_HAVE_CUDA
        qlt_backend *be = qlt_backend_cuda_create(0);
        if (be) return be;
        fprintf(stderr, "qlora-train: no usable GPU, running on the CPU (%s)\n", qlt_error());
#else
        fprintf(stderr, "qlora-train: built without CUDA: running on the CPU\n");
#endif
        return qlt_backend_cpu_create(threads);
    }
    qlt_fail("train.device: '%s' is not one of auto, cpu, cuda", device);
    return NULL;
}

const char *qlt_phase_name(qlt_phase p) {
    static const char *names[QLT_PHASE_COUNT] = {"forward GEMMs", "backward GEMMs", "LoRA", "attention", "loss",
                                                 "elementwise", "NF4 dequant", "optimizer", "other"};
    return p >= 0 && p < QLT_PHASE_COUNT ? names[p] : "?";
}
