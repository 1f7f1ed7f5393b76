/* comm.h: the communicator data parallel training talks through: this process's rank among `world` ranks, and
 * the collectives the trainer needs (an in-place sum of floats on the backend's memory, sums of host doubles,
 * a broadcast, a barrier, a bounded wait for the collectives enqueued so far, an abort). Two implementations:
 * Open MPI on the CPU path (comm_mpi.c, under mpirun) and NCCL on the CUDA path (comm_nccl.c, the unique id
 * handed out by the TCP rendezvous of rendezvous.c); docs/DISTRIBUTED.md. */
#ifndef QLT_COMM_H
#define QLT_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct qlt_comm qlt_comm;

struct qlt_comm {
    const char *name; /* "mpi" or "nccl" */
    int rank, world, local_rank;
    double timeout_s; /* how long a collective may take before the job ends (train.dist_timeout_s) */
    /* buf [n] floats in the backend's memory (the CUDA stream's order on NCCL): buf = sum over ranks */
    int (*all_reduce_sum_f32)(qlt_comm *c, float *buf, int64_t n);
    /* buf [n] doubles in host memory: buf = sum over ranks (blocks until done) */
    int (*all_reduce_host_f64)(qlt_comm *c, double *buf, int n);
    /* bytes of host memory from rank `root` to every rank (blocks until done) */
    int (*broadcast_host)(qlt_comm *c, void *buf, size_t bytes, int root);
    int (*barrier)(qlt_comm *c);
    /* waits (at most timeout_s) until the collectives enqueued so far are done; a failure names the rank */
    int (*wait)(qlt_comm *c);
    /* ends every rank of the job after printing `why` (does not return) */
    void (*abort)(qlt_comm *c, const char *why);
    void (*destroy)(qlt_comm *c);
    void *impl;
};

/* The launcher's torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or, under
 * mpirun, Open MPI's (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK). world 1 when none is set. */
typedef struct qlt_dist_env {
    int rank, world, local_rank;
    int under_mpi;          /* started by mpirun (Open MPI) */
    const char *master_addr; /* NULL when unset */
    int master_port;        /* 0 when unset */
} qlt_dist_env;

/* Reads and checks the variables; a malformed one is an error naming it. */
int qlt_dist_env_read(qlt_dist_env *env);

/* Open MPI through dlopen("libmpi.so.40"): *out NULL-free on success. */
int qlt_comm_mpi_open(qlt_comm **out, const qlt_dist_env *env, double timeout_s);
/* NCCL through dlopen("libnccl.so.2") on the CUDA stream `stream` (a cudaStream_t); the unique id goes from
 * rank 0 to the others through the rendezvous at MASTER_ADDR:MASTER_PORT. Builds without CUDA: an error. */
int qlt_comm_nccl_open(qlt_comm **out, const qlt_dist_env *env, double timeout_s, void *stream);

#endif
