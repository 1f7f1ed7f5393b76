/* comm_nccl.c: the communicator over NCCL, for data parallel on the CUDA path (`train --gpus N`, or a
 * torchrun-style launcher). libnccl.so.2 is opened at run time (QLT built with CUDA does not link it, so a
 * one-GPU run never needs it); nccl.h from the CUDA toolkit gives the types. Rank 0 makes the unique id and
 * hands it out through the TCP rendezvous (rendezvous.c). The sums run on the trainer's CUDA stream (so a
 * captured step captures them too); `wait` polls the stream and ncclCommGetAsyncError, and past
 * timeout_s aborts the communicator, so a dead or hung rank ends the job in bounded time. */
#include "dist/comm.h"

#include "common/error.h"

#ifdef QLT_HAVE_CUDA

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "common/clock.h"
#include "dist/rendezvous.h"

#define NCCL_LIBRARY "libnccl.so.2"
#define HOST_SCRATCH_DOUBLES 64

typedef struct nccl_impl {
    void *lib;
    ncclResult_t (*GetUniqueId)(ncclUniqueId *id);
    ncclResult_t (*CommInitRank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
    ncclResult_t (*AllReduce)(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                              ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*Broadcast)(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                              ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*CommGetAsyncError)(ncclComm_t comm, ncclResult_t *error);
    ncclResult_t (*CommAbort)(ncclComm_t comm);
    ncclResult_t (*CommDestroy)(ncclComm_t comm);
    const char *(*GetErrorString)(ncclResult_t result);
    ncclComm_t comm;
    cudaStream_t stream;
    double *host_scratch;   /* pinned [HOST_SCRATCH_DOUBLES] */
    double *device_scratch; /* device [HOST_SCRATCH_DOUBLES] */
    int aborted;
} nccl_impl;

static nccl_impl *impl_of(qlt_comm *c) { return c->impl; }

static int nccl_result(qlt_comm *c, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return 0;
    return qlt_fail("rank %d: %s failed: %s", c->rank, what, impl_of(c)->GetErrorString(r));
}

/* Waits for the stream, polling NCCL's asynchronous error; a peer that died or hangs ends it after timeout_s. */
static int nccl_wait(qlt_comm *c) {
    nccl_impl *n = impl_of(c);
    double deadline = qlt_now_seconds() + c->timeout_s;
    for (;;) {
        cudaError_t e = cudaStreamQuery(n->stream);
        if (e == cudaSuccess) return 0;
        if (e != cudaErrorNotReady)
            return qlt_fail("rank %d: CUDA error while waiting for the gradient all-reduce: %s", c->rank,
                            cudaGetErrorString(e));
        ncclResult_t async = ncclSuccess;
        n->CommGetAsyncError(n->comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
            n->CommAbort(n->comm);
            n->aborted = 1;
            return qlt_fail("rank %d: NCCL reports %s: another rank died or its link failed (the launcher's or "
                            "that rank's own error names it); the last checkpoint is intact", c->rank,
                            n->GetErrorString(async));
        }
        if (qlt_now_seconds() > deadline) {
            n->CommAbort(n->comm);
            n->aborted = 1;
            return qlt_fail("rank %d: a gradient all-reduce did not finish within %g s (train.dist_timeout_s): another "
                            "rank died or hangs (the launcher's or that rank's own error names it); the last "
                            "checkpoint is intact", c->rank, c->timeout_s);
        }
        usleep(200);
    }
}

static int nccl_all_reduce_sum_f32(qlt_comm *c, float *buf, int64_t n) {
    nccl_impl *m = impl_of(c);
    return nccl_result(c, m->AllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, m->comm, m->stream), "ncclAllReduce");
}

static int nccl_all_reduce_host_f64(qlt_comm *c, double *buf, int n) {
    nccl_impl *m = impl_of(c);
    if (n > HOST_SCRATCH_DOUBLES) return qlt_fail("rank %d: a host sum of %d values is too long", c->rank, n);
    memcpy(m->host_scratch, buf, sizeof(double) * (size_t)n);
    cudaMemcpyAsync(m->device_scratch, m->host_scratch, sizeof(double) * (size_t)n, cudaMemcpyHostToDevice, m->stream);
    QLT_TRY(nccl_result(c, m->AllReduce(m->device_scratch, m->device_scratch, (size_t)n, ncclFloat64, ncclSum, m->comm,
                                        m->stream), "ncclAllReduce"));
    cudaMemcpyAsync(m->host_scratch, m->device_scratch, sizeof(double) * (size_t)n, cudaMemcpyDeviceToHost, m->stream);
    QLT_TRY(nccl_wait(c));
    memcpy(buf, m->host_scratch, sizeof(double) * (size_t)n);
    return 0;
}

static int nccl_broadcast_host(qlt_comm *c, void *buf, size_t bytes, int root) {
    nccl_impl *m = impl_of(c);
    void *dev = NULL, *pinned = NULL;
    size_t size = bytes ? bytes : 1;
    if (cudaMalloc(&dev, size) != cudaSuccess || cudaMallocHost(&pinned, size) != cudaSuccess) {
        cudaFree(dev);
        return qlt_fail("rank %d: out of memory for a broadcast of %zu bytes", c->rank, bytes);
    }
    memcpy(pinned, buf, bytes);
    cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, m->stream);
    int rc = nccl_result(c, m->Broadcast(dev, dev, bytes, ncclUint8, root, m->comm, m->stream), "ncclBroadcast");
    if (rc == 0) cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, m->stream);
    if (rc == 0) rc = nccl_wait(c);
    if (rc == 0) memcpy(buf, pinned, bytes);
    cudaFree(dev);
    cudaFreeHost(pinned);
    return rc;
}

static int nccl_barrier(qlt_comm *c) {
    double zero = 0.0;
    return nccl_all_reduce_host_f64(c, &zero, 1);
}

static void nccl_abort(qlt_comm *c, const char *why) {
    fprintf(stderr, "qlora-train: rank %d: %s: ending this rank (the others end within train.dist_timeout_s)\n",
            c->rank, why);
    nccl_impl *n = impl_of(c);
    if (!n->aborted) n->CommAbort(n->comm);
    n->aborted = 1;
    exit(1);
}

static void nccl_destroy(qlt_comm *c) {
    nccl_impl *n = impl_of(c);
    if (n->comm && !n->aborted) n->CommDestroy(n->comm);
    cudaFree(n->device_scratch);
    cudaFreeHost(n->host_scratch);
    free(n);
    free(c);
}

static int nccl_load(nccl_impl *n) {
    n->lib = dlopen(NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib)
        return qlt_fail("data parallel on GPUs needs NCCL, but %s cannot be loaded (%s): install NCCL (e.g. PyPI's "
                        "nvidia-nccl-cu13 wheel) and put its lib/ on LD_LIBRARY_PATH", NCCL_LIBRARY, dlerror());
    int missing = 0;
#define NCCL_SYM(field, name)                                                                                      \
    do {                                                                                                           \
        *(void **)&n->field = dlsym(n->lib, name);                                                                 \
        if (!n->field) missing = 1;                                                                                \
    } while (0)
    NCCL_SYM(GetUniqueId, "ncclGetUniqueId");
    NCCL_SYM(CommInitRank, "ncclCommInitRank");
    NCCL_SYM(AllReduce, "ncclAllReduce");
    NCCL_SYM(Broadcast, "ncclBroadcast");
    NCCL_SYM(CommGetAsyncError, "ncclCommGetAsyncError");
    NCCL_SYM(CommAbort, "ncclCommAbort");
    NCCL_SYM(CommDestroy, "ncclCommDestroy");
    NCCL_SYM(GetErrorString, "ncclGetErrorString");
#undef NCCL_SYM
    if (missing) return qlt_fail("%s lacks functions qlora-train uses: install NCCL 2.12 or later", NCCL_LIBRARY);
    return 0;
}

int qlt_comm_nccl_open(qlt_comm **out, const qlt_dist_env *env, double timeout_s, void *stream) {
    *out = NULL;
    nccl_impl *n = qlt_xcalloc(1, sizeof *n);
    n->stream = (cudaStream_t)stream;
    if (nccl_load(n) != 0) {
        free(n);
        return -1;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = env->rank == 0 ? n->GetUniqueId(&id) : ncclSuccess;
    if (r != ncclSuccess) {
        qlt_fail("rank 0: ncclGetUniqueId failed: %s", n->GetErrorString(r));
        free(n);
        return -1;
    }
    if (qlt_rendezvous_share(env->master_addr, env->master_port, env->rank, env->world, timeout_s, &id,
                             sizeof id) != 0) {
        free(n);
        return -1;
    }
    r = n->CommInitRank(&n->comm, env->world, id, env->rank);
    if (r != ncclSuccess) {
        qlt_fail("rank %d: ncclCommInitRank (%d ranks) failed: %s%s", env->rank, env->world, n->GetErrorString(r),
                 r == ncclInvalidUsage ? "; two ranks on one GPU (LOCAL_RANK) give this too: one GPU a rank" : "");
        free(n);
        return -1;
    }
    if (cudaMallocHost((void **)&n->host_scratch, sizeof(double) * HOST_SCRATCH_DOUBLES) != cudaSuccess ||
        cudaMalloc((void **)&n->device_scratch, sizeof(double) * HOST_SCRATCH_DOUBLES) != cudaSuccess) {
        n->CommDestroy(n->comm);
        free(n);
        return qlt_fail("rank %d: out of memory for NCCL's scratch", env->rank);
    }
    qlt_comm *c = qlt_xcalloc(1, sizeof *c);
    *c = (qlt_comm){.name = "nccl", .rank = env->rank, .world = env->world, .local_rank = env->local_rank,
                    .timeout_s = timeout_s, .all_reduce_sum_f32 = nccl_all_reduce_sum_f32,
                    .all_reduce_host_f64 = nccl_all_reduce_host_f64, .broadcast_host = nccl_broadcast_host,
                    .barrier = nccl_barrier, .wait = nccl_wait, .abort = nccl_abort, .destroy = nccl_destroy,
                    .impl = n};
    *out = c;
    return 0;
}

#else

int qlt_comm_nccl_open(qlt_comm **out, const qlt_dist_env *env, double timeout_s, void *stream) {
    (void)timeout_s;
    (void)stream;
    *out = NULL;
    return qlt_fail("WORLD_SIZE=%d on the GPU path, but this build has no CUDA (data parallel on the CPU path runs "
                    "under mpirun: docs/DISTRIBUTED.md)", env->world);
}

#endif
