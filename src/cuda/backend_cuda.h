/* backend_cuda.h: the CUDA backend's few public extras beyond the qlt_backend table (C callable). */
#ifndef QLT_BACKEND_CUDA_H
#define QLT_BACKEND_CUDA_H

#include <stddef.h>

#include "backend/backend.h"

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
/* How the LoRA backward computes du and dB (for the checks and bisecting; QLT_LORA_DUDB in the
 * environment sets it at create): 0 two cuBLAS GEMMs a site, 1 the one-pass kernel (default), 2 the
 * one-pass kernel one token block a launch (its token-chunk loop, which otherwise runs only when the
 * partial sums outgrow the workspace). */
void qlt_cuda_set_lora_dudb(qlt_backend *be, int mode);
/* How many CUDA devices there are, asked quietly: 0 (and no error recorded, nothing printed) when there is no
 * GPU, no driver, or the driver is too old. */
int qlt_cuda_device_count(void);
/* The CUDA backend, or NULL with qlt_fail when no device is present. */
qlt_backend *qlt_backend_cuda_create(int device_index);

#ifdef __cplusplus
}
#endif

#endif
