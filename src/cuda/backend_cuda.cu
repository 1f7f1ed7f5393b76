/* backend_cuda.cu: the CUDA backend object: device selection, one stream, cuBLAS / cuBLASLt handles with
 * a fixed workspace (so cuBLAS never allocates inside a step or a graph capture), the fixed scratch
 * buffers the ops use, memory accounting, and the qlt_backend table over the ops of src/cuda/.
 * Only create / alloc / free / upload / download / sync / destroy / weight_* allocate or synchronize. */
#include "common/env.h"
#include "cuda/cuda_common.h"

#include <string.h>

extern "C" {
#include "cuda/attention_cudnn.h"
#include "cuda/backend_cuda.h"

#include <unistd.h>
}

/* Sizes of the allocations made through be->alloc, kept host-side (cudaMalloc pointers stay 256-byte
 * aligned: no header in device memory), for the memory report. */
typedef struct alloc_rec {
    void *p;
    size_t bytes;
} alloc_rec;

typedef struct cuda_backend_box {
    cuda_impl impl;
    alloc_rec *recs;
    int n_recs, cap_recs;
} cuda_backend_box;

/* The first device failure of the process (one CUDA backend a process): what fault_state answers. The backend
 * whose fault_unwind decides between recording and aborting is the one created last. */
static struct {
    qlt_backend *be;
    int state; /* QLT_FAULT_* */
    char msg[256];
} g_fault;

void qlt_cuda_fail_call(int cuda_error, int cublas_status, const char *stmt, const char *file, int line) {
    char what[200];
    if (cuda_error) snprintf(what, sizeof what, "CUDA error '%s'", cudaGetErrorString((cudaError_t)cuda_error));
    else snprintf(what, sizeof what, "cuBLAS error %d (%s)", cublas_status,
                  cublasGetStatusString((cublasStatus_t)cublas_status));
    if (g_fault.state != QLT_FAULT_NONE) return; /* the first failure is the one that matters; the calls after
                                                  * it (freeing, destroying) fail as the context does */
    if (!g_fault.be || !g_fault.be->fault_unwind) {
        fprintf(stderr, "qlora-train: %s in %s at %s:%d\n", what, stmt, file, line);
        abort();
    }
    /* an allocation that failed leaves the context working (and the failure is seen here, on the host, when the
     * call is made, so the optimizer ops of its step were never enqueued); anything else may have been a kernel
     * that failed on the device: the context is then unusable, or at least its memory cannot be vouched for */
    int alloc = cuda_error == (int)cudaErrorMemoryAllocation || cublas_status == (int)CUBLAS_STATUS_ALLOC_FAILED;
    (void)cudaGetLastError();
    int usable = alloc && cudaDeviceSynchronize() == cudaSuccess;
    g_fault.state = usable ? QLT_FAULT_RECOVERABLE : QLT_FAULT_STICKY;
    snprintf(g_fault.msg, sizeof g_fault.msg, "%s in %s (%s:%d)", what, stmt, file, line);
}

int qlt_cuda_faulted(void) { return g_fault.state != QLT_FAULT_NONE; }

static int cuda_fault_state(qlt_backend *be, char *msg, size_t cap) {
    if (cap) snprintf(msg, cap, "%s", g_fault.msg);
    return g_fault.state;
}

/* QLT_TEST_DEVICE_FAULT: what a failed allocation (recoverable) or an illegal address (sticky) records. */
static void cuda_fault_inject(qlt_backend *be, int sticky) {
    if (g_fault.state != QLT_FAULT_NONE) return;
    g_fault.state = sticky ? QLT_FAULT_STICKY : QLT_FAULT_RECOVERABLE;
    snprintf(g_fault.msg, sizeof g_fault.msg, "injected %s (QLT_TEST_DEVICE_FAULT)",
             sticky ? "'an illegal memory access was encountered'" : "'out of memory'");
}

static void track_add(cuda_impl *impl, size_t bytes) {
    size_t *current = impl->plan.on ? &impl->plan.live : &impl->mem_current;
    size_t *peak = impl->plan.on ? &impl->plan.peak : &impl->mem_peak;
    *current += bytes;
    if (*current > *peak) *peak = *current;
}

static void track_sub(cuda_impl *impl, size_t bytes) {
    if (impl->plan.on) impl->plan.live -= bytes;
    else impl->mem_current -= bytes;
}

/* Planning hands out addresses from here up, 256-byte aligned like cudaMalloc's; nothing is ever mapped there
 * by this backend, and they are never dereferenced (the planning pass runs no op). */
#define PLAN_FAKE_BASE ((uintptr_t)1 << 44)

void *qlt_cuda_alloc_tracked(qlt_backend *be, size_t bytes) {
    cuda_impl *impl = cuda_impl_of(be);
    void *p = NULL;
    if (impl->plan.on) {
        p = (void *)impl->plan.next;
        impl->plan.next += (bytes + 511) & ~(size_t)255;
        track_add(impl, bytes);
        return p;
    }
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        return NULL;
    }
    track_add(impl, bytes);
    return p;
}

void qlt_cuda_track(qlt_backend *be, int64_t bytes) {
    cuda_impl *impl = cuda_impl_of(be);
    if (bytes >= 0) track_add(impl, (size_t)bytes);
    else track_sub(impl, (size_t)(-bytes));
}

void qlt_cuda_free_tracked(qlt_backend *be, void *p, size_t bytes) {
    if (!p) return;
    cuda_impl *impl = cuda_impl_of(be);
    if (impl->plan.on) {
        QLT_ASSERT((uintptr_t)p >= PLAN_FAKE_BASE); /* a real buffer is never freed while planning */
        track_sub(impl, bytes);
        return;
    }
    CUDA_CHECK(cudaFree(p));
    impl->mem_current -= bytes;
}

static void *cuda_alloc(qlt_backend *be, size_t bytes);

#ifdef QLT_HAVE_CUDNN
/* cuDNN attention's workspace, when the caller's scratch is too small: a recorded allocation (freed with the
 * backend, counted in its peak) */
static void *cudnn_workspace_alloc(void *ctx, size_t bytes) { return cuda_alloc((qlt_backend *)ctx, bytes); }
#endif

static void *cuda_alloc(qlt_backend *be, size_t bytes) {
    cuda_backend_box *box = (cuda_backend_box *)be->impl;
    void *p = qlt_cuda_alloc_tracked(be, bytes);
    if (!p) return NULL;
    if (box->n_recs == box->cap_recs) {
        box->cap_recs = box->cap_recs ? 2 * box->cap_recs : 64;
        box->recs = (alloc_rec *)qlt_xrealloc(box->recs, sizeof(alloc_rec) * (size_t)box->cap_recs);
    }
    box->recs[box->n_recs].p = p;
    box->recs[box->n_recs].bytes = bytes;
    box->n_recs++;
    return p;
}

static void cuda_free(qlt_backend *be, void *p) {
    if (!p) return;
    qlt_cuda_bias_forget(be, (const float *)p); /* a bias's bf16 copy goes with it */
    cuda_backend_box *box = (cuda_backend_box *)be->impl;
    size_t bytes = 0;
    for (int i = box->n_recs - 1; i >= 0; i--)
        if (box->recs[i].p == p) {
            bytes = box->recs[i].bytes;
            box->recs[i] = box->recs[--box->n_recs];
            break;
        }
    qlt_cuda_free_tracked(be, p, bytes);
}

static void cuda_upload(qlt_backend *be, void *dst, const void *src, size_t n) {
    cuda_impl *impl = cuda_impl_of(be);
    if (impl->plan.on) return;
    /* stream-ordered with the ops; the host buffer may be reused by the caller right after return */
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, impl->stream));
    CUDA_CHECK(cudaStreamSynchronize(impl->stream));
}

static void cuda_download(qlt_backend *be, void *dst, const void *src, size_t n) {
    cuda_impl *impl = cuda_impl_of(be);
    if (impl->plan.on) {
        memset(dst, 0, n);
        return;
    }
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, impl->stream));
    CUDA_CHECK(cudaStreamSynchronize(impl->stream));
}

static void cuda_sync(qlt_backend *be) {
    if (!cuda_impl_of(be)->plan.on) CUDA_CHECK(cudaStreamSynchronize(cuda_impl_of(be)->stream));
}

/* ---- memory planning (backend.h) ---- */

static void cuda_plan_begin(qlt_backend *be) {
    cuda_impl *impl = cuda_impl_of(be);
    QLT_ASSERT(!impl->plan.on);
    impl->plan = (cuda_plan){1, PLAN_FAKE_BASE, 0, 0, impl->dequant_elems, impl->lora_ws_bytes, impl->lora_acc_bytes};
}

static size_t cuda_plan_end(qlt_backend *be) {
    cuda_impl *impl = cuda_impl_of(be);
    QLT_ASSERT(impl->plan.on);
    cuda_plan p = impl->plan;
    impl->plan.on = 0;
    return p.peak + sizeof(bf16) * (size_t)(p.dequant_elems - impl->dequant_elems) +
           (p.lora_ws_bytes - impl->lora_ws_bytes) + (p.lora_acc_bytes - impl->lora_acc_bytes);
}

/* ---- asynchronous transfers, events and graphs ---- */

static void *cuda_host_alloc(qlt_backend *be, size_t bytes) {
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 16) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(qlt_backend *be, void *p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

static void cuda_upload_async(qlt_backend *be, void *dst, const void *src, size_t n) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cuda_impl_of(be)->stream));
}

static void cuda_download_async(qlt_backend *be, void *dst, const void *src, size_t n) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cuda_impl_of(be)->stream));
}

static void cuda_event_record(qlt_backend *be, int slot) {
    cuda_impl *impl = cuda_impl_of(be);
    QLT_ASSERT(slot >= 0 && slot < QLT_BACKEND_EVENTS);
    CUDA_CHECK(cudaEventRecord(impl->marks[slot], impl->stream));
}

static void cuda_event_wait(qlt_backend *be, int slot) {
    QLT_ASSERT(slot >= 0 && slot < QLT_BACKEND_EVENTS);
    CUDA_CHECK(cudaEventSynchronize(cuda_impl_of(be)->marks[slot]));
}

static int cuda_capture_begin(qlt_backend *be) {
    cudaError_t e = cudaStreamBeginCapture(cuda_impl_of(be)->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return qlt_fail("CUDA graph capture could not start: %s", cudaGetErrorString(e));
    return 0;
}

static int cuda_capture_end(qlt_backend *be, void **graph) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(cuda_impl_of(be)->stream, &g);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return qlt_fail("CUDA graph capture of the training step failed (%s): set train.cuda_graph=false",
                        cudaGetErrorString(e));
    }
    *graph = exec;
    return 0;
}

static int cuda_graph_launch(qlt_backend *be, void *graph) {
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)graph, cuda_impl_of(be)->stream);
    if (e != cudaSuccess) return qlt_fail("CUDA graph launch failed: %s", cudaGetErrorString(e));
    return 0;
}

static void cuda_graph_free(qlt_backend *be, void *graph) {
    if (graph) CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

static void cuda_destroy(qlt_backend *be) {
    if (!be) return;
    cuda_backend_box *box = (cuda_backend_box *)be->impl;
    cuda_impl *impl = &box->impl;
    if (g_fault.be == be) g_fault.be = NULL;
    cudaStreamSynchronize(impl->stream);
#ifdef QLT_HAVE_CUDNN
    qlt_cudnn_attn_destroy(impl->cudnn);
#endif
    for (int i = 0; i < box->n_recs; i++) cudaFree(box->recs[i].p);
    free(box->recs);
    cudaFree(impl->conv);
    cudaFree(impl->gemv_arrivals);
    cudaFree(impl->lora_ws);
    cudaFree(impl->lora_acc);
    cudaFree(impl->partials);
    cudaFree(impl->amax);
    cudaFree(impl->dequant);
    qlt_cuda_cache_release(be);
    qlt_cuda_bias_release(be);
    qlt_cuda_clock_monitor_stop(impl->monitor, NULL);
    for (int i = 0; i < QLT_BACKEND_EVENTS; i++)
        if (impl->marks[i]) cudaEventDestroy(impl->marks[i]);
    if (impl->events) {
        for (int i = 0; i < QLT_CUDA_PROFILE_EVENTS; i++) cudaEventDestroy(impl->events[i]);
        free(impl->events);
        free(impl->event_phase);
    }
    if (impl->blas) cublasDestroy(impl->blas);
    if (impl->lt) cublasLtDestroy(impl->lt);
    if (impl->stream) cudaStreamDestroy(impl->stream);
    free(box);
    free(be);
}

extern "C" void qlt_cuda_memory_report(qlt_backend *be, size_t *current, size_t *peak, size_t *device_used,
                                       size_t *device_total) {
    size_t fr = 0, tot = 0;
    if (be && strcmp(be->name, "cuda") == 0) {
        cuda_impl *impl = cuda_impl_of(be);
        if (current) *current = impl->mem_current;
        if (peak) *peak = impl->mem_peak;
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) fr = tot = 0;
    } else {
        if (current) *current = 0;
        if (peak) *peak = 0;
    }
    if (device_used) *device_used = tot - fr;
    if (device_total) *device_total = tot;
}

extern "C" size_t qlt_cuda_peak_memory(qlt_backend *be) {
    size_t peak = 0;
    qlt_cuda_memory_report(be, NULL, &peak, NULL, NULL);
    return peak;
}

extern "C" void *qlt_cuda_stream(qlt_backend *be) { return (void *)cuda_impl_of(be)->stream; }

extern "C" void qlt_cuda_set_lora_dudb(qlt_backend *be, int mode) { cuda_impl_of(be)->lora_dudb = mode; }

/* ---- profiling: events at phase changes, summed per phase when read ---- */

/* Adds the elapsed times of the recorded events to phase_ms and keeps the last event as the new start. */
static void profile_fold(cuda_impl *impl) {
    if (impl->n_events < 2) return;
    CUDA_CHECK(cudaEventSynchronize(impl->events[impl->n_events - 1]));
    for (int i = 0; i + 1 < impl->n_events; i++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, impl->events[i], impl->events[i + 1]));
        impl->phase_ms[impl->event_phase[i]] += ms;
    }
    cudaEvent_t last = impl->events[impl->n_events - 1];
    impl->events[impl->n_events - 1] = impl->events[0];
    impl->events[0] = last;
    impl->event_phase[0] = impl->event_phase[impl->n_events - 1];
    impl->n_events = 1;
}

static void cuda_phase(qlt_backend *be, qlt_phase p) {
    cuda_impl *impl = cuda_impl_of(be);
    if (!impl->profiling || (p == impl->phase && impl->n_events > 0)) {
        impl->phase = p;
        return;
    }
    if (impl->n_events == QLT_CUDA_PROFILE_EVENTS) profile_fold(impl);
    CUDA_CHECK(cudaEventRecord(impl->events[impl->n_events], impl->stream));
    impl->event_phase[impl->n_events++] = p;
    impl->phase = p;
}

static void cuda_profile_on(qlt_backend *be, int on) {
    cuda_impl *impl = cuda_impl_of(be);
    if (on && !impl->events) {
        impl->events = (cudaEvent_t *)qlt_xcalloc(QLT_CUDA_PROFILE_EVENTS, sizeof(cudaEvent_t));
        impl->event_phase = (qlt_phase *)qlt_xcalloc(QLT_CUDA_PROFILE_EVENTS, sizeof(qlt_phase));
        for (int i = 0; i < QLT_CUDA_PROFILE_EVENTS; i++) CUDA_CHECK(cudaEventCreate(&impl->events[i]));
    }
    impl->profiling = on;
    impl->n_events = 0;
    memset(impl->phase_ms, 0, sizeof impl->phase_ms);
    if (on) cuda_phase(be, QLT_PHASE_OTHER);
}

static void cuda_profile_read(qlt_backend *be, double ms[QLT_PHASE_COUNT]) {
    cuda_impl *impl = cuda_impl_of(be);
    if (impl->profiling) {
        qlt_phase p = impl->phase;
        cuda_phase(be, p == QLT_PHASE_OTHER ? QLT_PHASE_LOSS : QLT_PHASE_OTHER); /* close the last interval */
        profile_fold(impl);
        impl->phase = p;
    }
    memcpy(ms, impl->phase_ms, sizeof impl->phase_ms);
}

static size_t cuda_peak_bytes(qlt_backend *be) { return qlt_cuda_peak_memory(be); }
static size_t cuda_live_bytes(qlt_backend *be) { return cuda_impl_of(be)->mem_current; }

static size_t cuda_device_used_bytes(qlt_backend *be) {
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return total - free_b;
}

static size_t cuda_available_bytes(qlt_backend *be) {
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return free_b;
}

/* The bf16 GEMM rate this device reaches on a large square product (the MFU denominator): the median of
 * 10 timed 8192^3 products on random data, after 3 warm-ups. */
static double cuda_gemm_peak_tflops(qlt_backend *be) {
    cuda_impl *impl = cuda_impl_of(be);
    const int64_t n = 8192;
    size_t bytes = sizeof(bf16) * (size_t)(n * n);
    bf16 *a = (bf16 *)qlt_cuda_alloc_tracked(be, 3 * bytes);
    if (!a) return 0;
    bf16 *b = a + n * n, *c = b + n * n;
    qlt_cuda_fill_random_bf16(impl->stream, a, 2 * n * n, 1234);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float times[10];
    for (int i = -3; i < 10; i++) {
        CUDA_CHECK(cudaEventRecord(e0, impl->stream));
        qlt_cuda_gemm(be, 0, 1, n, n, n, 1.0f, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, 0.0f, c, CUDA_R_16BF, n);
        CUDA_CHECK(cudaEventRecord(e1, impl->stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (i >= 0) CUDA_CHECK(cudaEventElapsedTime(&times[i], e0, e1));
    }
    for (int i = 1; i < 10; i++)
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            float t = times[j];
            times[j] = times[j - 1];
            times[j - 1] = t;
        }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    qlt_cuda_free_tracked(be, a, 3 * bytes);
    double ms = 0.5 * (times[4] + times[5]);
    return 2.0 * (double)n * n * n / (ms * 1e-3) / 1e12;
}

static void cuda_clock_monitor(qlt_backend *be, int on, qlt_clock_report *out) {
    cuda_impl *impl = cuda_impl_of(be);
    /* idle at both ends, so the energy counted is the monitored steps' and nothing else's */
    if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
    if (on) {
        if (!impl->monitor) impl->monitor = qlt_cuda_clock_monitor_start(impl->device);
        return;
    }
    qlt_cuda_clock_monitor_stop(impl->monitor, out);
    impl->monitor = NULL;
}

static void cuda_weight_free(qlt_backend *be, qlt_weight *w) { qlt_cuda_weight_free(be, w); }

/* No NVIDIA driver loaded: CUDA then says "CUDA driver version is insufficient for CUDA runtime version", which
 * on a machine without a GPU only confuses; such a machine simply has no GPU. */
static int nvidia_driver_loaded(void) { return access("/proc/driver/nvidia/version", F_OK) == 0; }

extern "C" int qlt_cuda_device_count(void) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}

/* The largest dynamic shared memory a block may opt into on compute capability major.minor (CUDA programming
 * guide, "Technical Specifications per Compute Capability"); 0 for one not listed. */
static size_t smem_optin_of(int major, int minor) {
    if (major == 8 && minor == 0) return 163 * 1024;
    if (major == 8 && minor == 7) return 163 * 1024;
    if (major == 8 && (minor == 6 || minor == 9)) return 99 * 1024;
    if (major == 9 && minor == 0) return 227 * 1024;
    return 0;
}

/* The compute capability the kernels are chosen for: the device's own, or QLT_CUDA_CAPABILITY's (a debugging
 * override that may only lower it, so that an Ampere or Ada GPU's limits are tested on a Hopper). */
static int apply_capability_override(cuda_impl *impl, const cudaDeviceProp *prop) {
    impl->cc_major = prop->major;
    impl->cc_minor = prop->minor;
    impl->smem_optin = prop->sharedMemPerBlockOptin;
    const char *text = qlt_env(QLT_ENV_CUDA_CAPABILITY);
    if (!text) return 0;
    int major = 0, minor = 0, used = 0;
    size_t limit = 0;
    if (sscanf(text, "%d.%d%n", &major, &minor, &used) != 2 || text[used] || !(limit = smem_optin_of(major, minor)))
        return qlt_fail("QLT_CUDA_CAPABILITY=%s: expected 8.0, 8.6, 8.7, 8.9 or 9.0 (or unset it)", text);
    if (major * 10 + minor > prop->major * 10 + prop->minor)
        return qlt_fail("QLT_CUDA_CAPABILITY=%s is above the device's own compute capability %d.%d (%s): it can only "
                        "lower it", text, prop->major, prop->minor, prop->name);
    impl->cc_major = major;
    impl->cc_minor = minor;
    if (limit < impl->smem_optin) impl->smem_optin = limit;
    fprintf(stderr, "qlora-train: CUDA kernels chosen as on compute capability %d.%d (QLT_CUDA_CAPABILITY; %s is %d.%d): "
            "%zu KiB of shared memory a block\n", major, minor, prop->name, prop->major, prop->minor,
            impl->smem_optin / 1024);
    return 0;
}

extern "C" qlt_backend *qlt_backend_cuda_create(int device_index) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        if (count == 0 && (err == cudaSuccess || err == cudaErrorNoDevice || !nvidia_driver_loaded()))
            qlt_fail("no GPU found (no NVIDIA driver or device on this machine): use --set train.device=cpu "
                     "(or train.device: auto, which falls back to the CPU)");
        else
            qlt_fail("no CUDA device is usable (%s): use --set train.device=cpu", cudaGetErrorString(err));
        return NULL;
    }
    if (device_index < 0 || device_index >= count) {
        qlt_fail("CUDA device %d does not exist (this machine has %d)", device_index, count);
        return NULL;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
    if (prop.major < 8) {
        qlt_fail("CUDA device %d (%s) has compute capability %d.%d; qlora-train needs 8.0 or newer (bf16 tensor "
                 "cores)", device_index, prop.name, prop.major, prop.minor);
        return NULL;
    }
    CUDA_CHECK(cudaSetDevice(device_index));

    qlt_backend *be = (qlt_backend *)qlt_xcalloc(1, sizeof *be);
    cuda_backend_box *box = (cuda_backend_box *)qlt_xcalloc(1, sizeof *box);
    cuda_impl *impl = &box->impl;
    be->impl = box; /* box starts with impl: cuda_impl_of works */
    g_fault.be = be;
    be->name = "cuda";
    snprintf(be->device_name, sizeof be->device_name, "%s (CUDA device %d)", prop.name, device_index);
    be->act_dtype = QLT_DTYPE_BF16;
    be->backward_a = QLT_BACKWARD_A_BF16;
    impl->device = device_index;
    impl->n_sm = prop.multiProcessorCount;
    if (apply_capability_override(impl, &prop) != 0) {
        cuda_destroy(be);
        return NULL;
    }
    const char *dudb = qlt_env(QLT_ENV_LORA_DUDB);
    impl->lora_dudb = dudb ? atoi(dudb) : 1;
    CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
    if (cublasCreate(&impl->blas) != CUBLAS_STATUS_SUCCESS || cublasLtCreate(&impl->lt) != CUBLAS_STATUS_SUCCESS) {
        qlt_fail("cuBLAS could not be initialized on CUDA device %d", device_index);
        cuda_destroy(be);
        return NULL;
    }
    CUBLAS_CHECK(cublasSetStream(impl->blas, impl->stream));
    /* no TF32 for fp32 GEMMs; split-K partial sums of bf16 / fp16 outputs kept in fp32 */
    CUBLAS_CHECK(cublasSetMathMode(impl->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    CUBLAS_CHECK(cublasSetPointerMode(impl->blas, CUBLAS_POINTER_MODE_HOST));
    size_t conv_bytes = sizeof(float) * 3 * (size_t)QLT_CUDA_CONV_ELEMS;
    impl->conv = (float *)qlt_cuda_alloc_tracked(be, conv_bytes);
    impl->lora_ws = qlt_cuda_alloc_tracked(be, QLT_CUDA_LORA_BYTES);
    impl->lora_acc = (float *)qlt_cuda_alloc_tracked(be, QLT_CUDA_LORA_ACC_BYTES);
    impl->lora_ws_bytes = QLT_CUDA_LORA_BYTES;
    impl->lora_acc_bytes = QLT_CUDA_LORA_ACC_BYTES;
    impl->partials = (double *)qlt_cuda_alloc_tracked(be, sizeof(double) * QLT_CUDA_NORM_BLOCKS);
    impl->amax = (float *)qlt_cuda_alloc_tracked(be, sizeof(float) * 2);
    impl->gemv_arrivals = (unsigned *)qlt_cuda_alloc_tracked(be, sizeof(unsigned) * QLT_CUDA_GEMV_TILES);
    if (impl->gemv_arrivals)
        CUDA_CHECK(cudaMemsetAsync(impl->gemv_arrivals, 0, sizeof(unsigned) * QLT_CUDA_GEMV_TILES, impl->stream));
    if (!impl->conv || !impl->lora_ws || !impl->lora_acc || !impl->partials || !impl->amax || !impl->gemv_arrivals) {
        qlt_fail("CUDA device %d: could not allocate the backend's %zu MiB of workspaces", device_index,
                 (conv_bytes + QLT_CUDA_LORA_BYTES) >> 20);
        cuda_destroy(be);
        return NULL;
    }
    /* No cuBLAS workspace: with one, its Hopper GEMM kernels have a memset zero their scheduler's workspace
     * before each launch, which leaves the GPU idle between the nodes of a replayed graph; without, cuBLAS
     * picks kernels that need none and never splits K over a workspace (the same results run to run). */
    CUBLAS_CHECK(cublasSetWorkspace(impl->blas, NULL, 0));
#ifdef QLT_HAVE_CUDNN
    impl->cudnn = qlt_cudnn_attn_create(impl->stream, cudnn_workspace_alloc, be);
    be->cudnn_version = qlt_cudnn_attn_version(impl->cudnn);
#endif

    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->sync = cuda_sync;
    be->destroy = cuda_destroy;
    be->weight_create = qlt_cuda_weight_create;
    be->weight_free = cuda_weight_free;
    be->weight_from_nf4 = qlt_cuda_weight_from_nf4;
    be->profile_on = cuda_profile_on;
    be->phase = cuda_phase;
    be->profile_read = cuda_profile_read;
    be->peak_bytes = cuda_peak_bytes;
    be->live_bytes = cuda_live_bytes;
    be->plan_begin = cuda_plan_begin;
    be->plan_end = cuda_plan_end;
    be->dequant_cache_held = qlt_cuda_cache_bytes;
    be->available_bytes = cuda_available_bytes;
    be->device_used_bytes = cuda_device_used_bytes;
    be->gemm_peak_tflops = cuda_gemm_peak_tflops;
    be->clock_monitor = cuda_clock_monitor;
    be->host_alloc = cuda_host_alloc;
    be->host_free = cuda_host_free;
    be->upload_async = cuda_upload_async;
    be->download_async = cuda_download_async;
    be->event_record = cuda_event_record;
    be->event_wait = cuda_event_wait;
    be->capture_begin = cuda_capture_begin;
    be->capture_end = cuda_capture_end;
    be->graph_launch = cuda_graph_launch;
    be->graph_free = cuda_graph_free;
    be->fault_state = cuda_fault_state;
    be->fault_inject = cuda_fault_inject;
    for (int i = 0; i < QLT_BACKEND_EVENTS; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&impl->marks[i], cudaEventDisableTiming));
    be->zero = qlt_cuda_zero;
    be->embed = qlt_cuda_embed;
    be->rmsnorm_fwd = qlt_cuda_rmsnorm_fwd;
    be->rmsnorm_bwd = qlt_cuda_rmsnorm_bwd;
    be->weight_stack_prepare = qlt_cuda_weight_stack_prepare;
    be->bias_prepare = qlt_cuda_bias_prepare;
    be->linear_fwd = qlt_cuda_linear_fwd;
    be->linear_bwd_x = qlt_cuda_linear_bwd_x;
    be->lora_fwd = qlt_cuda_lora_fwd;
    /* QLT_LORA_FOLD=0 (common/env.h): adapters added by their own GEMMs, forward and backward (for bisecting) */
    const char *fold = qlt_env(QLT_ENV_LORA_FOLD);
    be->linear_lora_fwd = fold && fold[0] == '0' ? NULL : qlt_cuda_linear_lora_fwd;
    be->linear_lora_bwd = fold && fold[0] == '0' ? NULL : qlt_cuda_linear_lora_bwd;
    be->lora_group_prepare = qlt_cuda_lora_group_prepare;
    be->lora_bwd = qlt_cuda_lora_bwd;
    be->rope = qlt_cuda_rope;
    be->attention_fwd = qlt_cuda_attention_fwd;
    be->attention_bwd = qlt_cuda_attention_bwd;
    be->swiglu_fwd = qlt_cuda_swiglu_fwd;
    be->swiglu_bwd = qlt_cuda_swiglu_bwd;
    be->add_rmsnorm_fwd = qlt_cuda_add_rmsnorm_fwd;
    be->head_norm_rope_fwd = qlt_cuda_head_norm_rope_fwd;
    be->head_norm_rope_bwd = qlt_cuda_head_norm_rope_bwd;
    be->copy = qlt_cuda_copy;
    be->add = qlt_cuda_add;
    be->dropout = qlt_cuda_dropout;
    be->attention_bwd_scratch_bytes = qlt_cuda_attention_bwd_scratch_bytes;
    be->attention_plan = qlt_cuda_attention_plan;
    be->attention_decode = qlt_cuda_attention_decode;
    be->kv_store = qlt_cuda_kv_store;
    be->lm_head_loss = qlt_cuda_lm_head_loss;
    be->loss_scratch_bytes = qlt_cuda_loss_scratch_bytes;
    be->logits = qlt_cuda_logits;
    be->grad_norm_sq = qlt_cuda_grad_norm_sq;
    be->adamw = qlt_cuda_adamw;
    return be;
}
