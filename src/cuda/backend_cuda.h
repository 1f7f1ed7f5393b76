/* backend_cuda.h: the CUDA backend's few public extras beyond the qlt_backend table (C callable). */
#ifndef QLT_BACKEND_CUDA_H
#define QLT_BACKEND_CUDA_H

#include <stddef.h>

#include "common/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes this backend holds now and at most so far (alloc + weights + workspaces), and the device's
 * own view (cudaMemGetInfo: used = total - free). Any pointer may be NULL. */
void qlt_cuda_memory_report(qlt_backend *be, size_t *current, size_t *peak, size_t *device_used,
                            size_t *device_total);
/* Peak bytes held through the backend (0 for a non-CUDA backend). */
size_t qlt_cuda_peak_memory(qlt_backend *be);
/* The cudaStream_t every op of this backend runs on (for CUDA-graph capture of a whole step). */
void *qlt_cuda_stream(qlt_backend *be);

#ifdef __cplusplus
}
#endif

#endif
