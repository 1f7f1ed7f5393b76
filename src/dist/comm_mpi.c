/* comm_mpi.c: the communicator over Open MPI, for data parallel on the CPU path (mpirun -np N qlora-train
 * train ...). libmpi.so.40 is opened at run time, so the binary needs MPI only when it runs under mpirun; its
 * predefined handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, ...) are the addresses of Open MPI's ompi_mpi_*
 * globals, which is how Open MPI's own mpi.h defines them (Open MPI's ABI, stable across libmpi.so.40). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dist/comm.h"

#define MPI_LIBRARY "libmpi.so.40"
#define MPI_IN_PLACE_ADDRESS ((void *)1) /* Open MPI's MPI_IN_PLACE */
#define MPI_OK 0

typedef void *mpi_handle; /* MPI_Comm, MPI_Datatype, MPI_Op: pointers to Open MPI objects */

typedef struct mpi_api {
    void *lib;
    int (*Initialized)(int *flag);
    int (*Init)(int *argc, char ***argv);
    int (*Finalized)(int *flag);
    int (*Finalize)(void);
    int (*Comm_rank)(mpi_handle comm, int *rank);
    int (*Comm_size)(mpi_handle comm, int *size);
    int (*Allreduce)(const void *send, void *recv, int count, mpi_handle type, mpi_handle op, mpi_handle comm);
    int (*Bcast)(void *buf, int count, mpi_handle type, int root, mpi_handle comm);
    int (*Barrier)(mpi_handle comm);
    int (*Abort)(mpi_handle comm, int code);
    mpi_handle comm_world, type_float, type_double, type_byte, op_sum;
} mpi_api;

static void *symbol(void *lib, const char *name, int *missing) {
    void *p = dlsym(lib, name);
    if (!p) *missing = 1;
    return p;
}

static int mpi_load(mpi_api *m) {
    /* RTLD_GLOBAL: Open MPI's components (dlopened by libmpi itself) resolve libmpi's symbols */
    m->lib = dlopen(MPI_LIBRARY, RTLD_NOW | RTLD_GLOBAL);
    if (!m->lib)
        return qlt_fail("running under mpirun, but %s (Open MPI) cannot be loaded (%s): install Open MPI "
                        "(Debian: libopenmpi3 / libopenmpi-dev) on every machine of the job", MPI_LIBRARY, dlerror());
    int missing = 0;
    *(void **)&m->Initialized = symbol(m->lib, "MPI_Initialized", &missing);
    *(void **)&m->Init = symbol(m->lib, "MPI_Init", &missing);
    *(void **)&m->Finalized = symbol(m->lib, "MPI_Finalized", &missing);
    *(void **)&m->Finalize = symbol(m->lib, "MPI_Finalize", &missing);
    *(void **)&m->Comm_rank = symbol(m->lib, "MPI_Comm_rank", &missing);
    *(void **)&m->Comm_size = symbol(m->lib, "MPI_Comm_size", &missing);
    *(void **)&m->Allreduce = symbol(m->lib, "MPI_Allreduce", &missing);
    *(void **)&m->Bcast = symbol(m->lib, "MPI_Bcast", &missing);
    *(void **)&m->Barrier = symbol(m->lib, "MPI_Barrier", &missing);
    *(void **)&m->Abort = symbol(m->lib, "MPI_Abort", &missing);
    m->comm_world = symbol(m->lib, "ompi_mpi_comm_world", &missing);
    m->type_float = symbol(m->lib, "ompi_mpi_float", &missing);
    m->type_double = symbol(m->lib, "ompi_mpi_double", &missing);
    m->type_byte = symbol(m->lib, "ompi_mpi_byte", &missing);
    m->op_sum = symbol(m->lib, "ompi_mpi_op_sum", &missing);
    if (missing) {
        dlclose(m->lib);
        return qlt_fail("%s lacks the MPI functions or Open MPI objects qlora-train uses: it is not Open MPI 3 or "
                        "later; install Debian's libopenmpi3", MPI_LIBRARY);
    }
    return 0;
}

static mpi_api *api_of(qlt_comm *c) { return c->impl; }

/* MPI's count is an int: a long buffer goes in pieces. */
static int sum_in_place(qlt_comm *c, void *buf, int64_t n, size_t elem, mpi_handle type) {
    mpi_api *m = api_of(c);
    const int64_t piece = 1 << 28;
    for (int64_t done = 0; done < n; done += piece) {
        int count = (int)(n - done < piece ? n - done : piece);
        if (m->Allreduce(MPI_IN_PLACE_ADDRESS, (char *)buf + (size_t)done * elem, count, type, m->op_sum,
                         m->comm_world) != MPI_OK)
            return qlt_fail("rank %d: MPI_Allreduce failed", c->rank);
    }
    return 0;
}

static int mpi_all_reduce_sum_f32(qlt_comm *c, float *buf, int64_t n) {
    return sum_in_place(c, buf, n, sizeof(float), api_of(c)->type_float);
}

static int mpi_all_reduce_host_f64(qlt_comm *c, double *buf, int n) {
    return sum_in_place(c, buf, n, sizeof(double), api_of(c)->type_double);
}

static int mpi_broadcast_host(qlt_comm *c, void *buf, size_t bytes, int root) {
    mpi_api *m = api_of(c);
    if (bytes > (size_t)1 << 30) return qlt_fail("rank %d: a broadcast of %zu bytes is too large", c->rank, bytes);
    if (m->Bcast(buf, (int)bytes, m->type_byte, root, m->comm_world) != MPI_OK)
        return qlt_fail("rank %d: MPI_Bcast failed", c->rank);
    return 0;
}

static int mpi_barrier(qlt_comm *c) {
    mpi_api *m = api_of(c);
    if (m->Barrier(m->comm_world) != MPI_OK) return qlt_fail("rank %d: MPI_Barrier failed", c->rank);
    return 0;
}

/* MPI's collectives return when done; a rank that dies makes mpirun end the whole job. */
static int mpi_wait(qlt_comm *c) {
    (void)c;
    return 0;
}

static void mpi_abort(qlt_comm *c, const char *why) {
    fprintf(stderr, "qlora-train: rank %d: %s: ending every rank\n", c->rank, why);
    api_of(c)->Abort(api_of(c)->comm_world, 1);
    exit(1);
}

static void mpi_destroy(qlt_comm *c) {
    mpi_api *m = api_of(c);
    int finalized = 1;
    if (m->Finalized(&finalized) == MPI_OK && !finalized) m->Finalize();
    /* libmpi stays loaded: its atexit handlers and threads may still refer to it */
    free(m);
    free(c);
}

int qlt_comm_mpi_open(qlt_comm **out, const qlt_dist_env *env, double timeout_s) {
    *out = NULL;
    mpi_api *m = qlt_xcalloc(1, sizeof *m);
    if (mpi_load(m) != 0) {
        free(m);
        return -1;
    }
    int initialized = 0, rank = -1, world = 0;
    if (m->Initialized(&initialized) != MPI_OK || (!initialized && m->Init(NULL, NULL) != MPI_OK)) {
        free(m);
        return qlt_fail("MPI_Init failed (rank %d of %d under mpirun)", env->rank, env->world);
    }
    m->Comm_rank(m->comm_world, &rank);
    m->Comm_size(m->comm_world, &world);
    if (rank != env->rank || world != env->world) {
        m->Finalize();
        free(m);
        return qlt_fail("MPI says rank %d of %d but OMPI_COMM_WORLD_RANK / _SIZE say %d of %d: start the job with "
                        "Open MPI's own mpirun", rank, world, env->rank, env->world);
    }
    qlt_comm *c = qlt_xcalloc(1, sizeof *c);
    *c = (qlt_comm){.name = "mpi", .rank = rank, .world = world, .local_rank = env->local_rank,
                    .timeout_s = timeout_s, .all_reduce_sum_f32 = mpi_all_reduce_sum_f32,
                    .all_reduce_host_f64 = mpi_all_reduce_host_f64, .broadcast_host = mpi_broadcast_host,
                    .barrier = mpi_barrier, .wait = mpi_wait, .abort = mpi_abort, .destroy = mpi_destroy,
                    .impl = m};
    *out = c;
    return 0;
}
