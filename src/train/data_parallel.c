/* data_parallel.c: the trainer's side of data parallel training (see data_parallel.h): which rows a rank
 * reads, the communicator it opens, and the sums it takes part in. */
#include "train/data_parallel.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "dist/comm.h"
#ifdef QLT_HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

int64_t qlt_dp_micro_first_row(int64_t cursor, int micro_batch, int grad_accum, int rank, int micro) {
    return cursor + ((int64_t)rank * grad_accum + micro) * (int64_t)micro_batch;
}

int64_t qlt_dp_global_micro(int64_t step, int grad_accum, int world, int rank, int micro) {
    return step * (int64_t)grad_accum * world + (int64_t)rank * grad_accum + micro;
}

int qlt_dp_eval_owns(int64_t batch, int rank, int world) { return world <= 1 || batch % world == rank; }

int qlt_dp_gpu_index(void) {
    qlt_dist_env env;
    if (qlt_dist_env_read(&env) != 0) return 0; /* qlt_dp_open reports the bad variable */
    return env.world > 1 ? env.local_rank : 0;
}

int qlt_dp_open(qlt_trainer *t) {
    t->comm = NULL;
    t->dist_rank = 0;
    t->dist_world = 1;
    qlt_dist_env env;
    QLT_TRY(qlt_dist_env_read(&env));
    if (env.world == 1) return 0;
    const char *backend = t->be->name;
    double timeout = t->cfg->train.dist_timeout_s;
    if (env.under_mpi) {
        if (strcmp(backend, "cpu") != 0)
            return qlt_fail("started by mpirun with %d ranks on the %s backend: mpirun runs data parallel on the CPU "
                            "path (set train.device: cpu); on GPUs use `qlora-train train --gpus N` or a "
                            "torchrun-style launcher (docs/DISTRIBUTED.md)", env.world, backend);
        QLT_TRY(qlt_comm_mpi_open(&t->comm, &env, timeout));
    } else {
        if (strcmp(backend, "cuda") != 0)
            return qlt_fail("WORLD_SIZE=%d on the %s backend: data parallel on the CPU path runs under mpirun "
                            "(`mpirun -np %d qlora-train train ...`), on GPUs with train.device: cuda "
                            "(docs/DISTRIBUTED.md)", env.world, backend, env.world);
#ifdef QLT_HAVE_CUDA
        QLT_TRY(qlt_comm_nccl_open(&t->comm, &env, timeout, qlt_cuda_stream(t->be)));
#else
        QLT_TRY(qlt_comm_nccl_open(&t->comm, &env, timeout, NULL));
#endif
    }
    t->dist_rank = t->comm->rank;
    t->dist_world = t->comm->world;
    fprintf(stderr, "qlora-train: rank %d of %d (%s)\n", t->dist_rank, t->dist_world, t->comm->name);
    return 0;
}

int qlt_dp_reduce_step(qlt_trainer *t) {
    if (!t->comm) return 0;
    QLT_TRY(t->comm->all_reduce_sum_f32(t->comm, t->lora.grads, t->lora.n_params));
    return t->comm->all_reduce_sum_f32(t->comm, &t->scalars->loss_sum, 1);
}

int qlt_dp_wait(qlt_trainer *t) { return t->comm ? t->comm->wait(t->comm) : 0; }

int qlt_dp_sum_host(qlt_trainer *t, double *values, int n) {
    return t->comm ? t->comm->all_reduce_host_f64(t->comm, values, n) : 0;
}

int qlt_dp_any(qlt_trainer *t, int flag) {
    if (!t->comm) return flag != 0;
    double v = flag != 0;
    if (t->comm->all_reduce_host_f64(t->comm, &v, 1) != 0) return flag != 0;
    return v > 0.0;
}

int qlt_dp_is_root(const qlt_trainer *t) { return t->dist_rank == 0; }

void qlt_dp_close(qlt_trainer *t) {
    if (t->comm) t->comm->destroy(t->comm);
    t->comm = NULL;
}
