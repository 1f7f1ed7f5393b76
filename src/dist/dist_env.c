/* dist_env.c: which rank this process is and how to reach rank 0, from the launcher's environment
 * (torchrun-style variables, or Open MPI's under mpirun): one place reads and checks them (comm.h). */
#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/error.h"
#include "dist/comm.h"

/* A whole number in [lo, hi] from the variable v; *out unchanged when it is unset. */
static int env_int(qlt_env_var v, long lo, long hi, int *out) {
    const char *text = qlt_env(v);
    if (!text) return 0;
    char *end;
    long value = strtol(text, &end, 10);
    if (*end || end == text || value < lo || value > hi)
        return qlt_fail("environment variable %s=%s: expected a whole number in [%ld, %ld] (or unset it)",
                        qlt_env_name(v), text, lo, hi);
    *out = (int)value;
    return 0;
}

int qlt_dist_env_read(qlt_dist_env *env) {
    *env = (qlt_dist_env){.rank = 0, .world = 1, .local_rank = 0};
    if (qlt_env(QLT_ENV_OMPI_SIZE)) { /* mpirun: MPI itself says the same, this only picks the path */
        env->under_mpi = 1;
        QLT_TRY(env_int(QLT_ENV_OMPI_SIZE, 1, 1 << 20, &env->world));
        QLT_TRY(env_int(QLT_ENV_OMPI_RANK, 0, env->world - 1, &env->rank));
        env->local_rank = env->rank;
        QLT_TRY(env_int(QLT_ENV_OMPI_LOCAL_RANK, 0, env->world - 1, &env->local_rank));
        return 0;
    }
    QLT_TRY(env_int(QLT_ENV_WORLD_SIZE, 1, 1 << 20, &env->world));
    if (env->world == 1) return 0;
    if (!qlt_env(QLT_ENV_RANK))
        return qlt_fail("environment variable WORLD_SIZE=%d but RANK is unset: a launcher sets both (or start the "
                        "ranks with `qlora-train train --gpus N`)", env->world);
    QLT_TRY(env_int(QLT_ENV_RANK, 0, env->world - 1, &env->rank));
    env->local_rank = env->rank;
    QLT_TRY(env_int(QLT_ENV_LOCAL_RANK, 0, 1 << 16, &env->local_rank));
    env->master_addr = qlt_env(QLT_ENV_MASTER_ADDR);
    QLT_TRY(env_int(QLT_ENV_MASTER_PORT, 1, 65535, &env->master_port));
    if (!env->master_addr || !env->master_port)
        return qlt_fail("environment variable WORLD_SIZE=%d but %s is unset: set MASTER_ADDR and MASTER_PORT to rank "
                        "0's address and a free TCP port there", env->world,
                        !env->master_addr ? "MASTER_ADDR" : "MASTER_PORT");
    return 0;
}
