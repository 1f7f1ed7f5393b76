/* env.c: the environment variables' table (env.h). */
#include "common/env.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *help;
} vars[QLT_ENV_COUNT] = {
    [QLT_ENV_CUDA_GRAPH] = {"CUDA_GRAPH", "1/0, true/false, yes/no, on/off: sets train.cuda_graph (over the config file; "
                                            "--set wins over it)"},
    [QLT_ENV_CUDNN_LIBRARY] = {"QLT_CUDNN_LIBRARY", "the libcudnn.so.9 to open for cuDNN's attention (default: "
                                                     "libcudnn.so.9 from the loader's search path)"},
    [QLT_ENV_CUDNN_RAGGED] = {"QLT_CUDNN_RAGGED", "debugging: 1 runs rows of one example through cuDNN's ragged "
                                                   "layout too (to measure the two layouts)"},
    [QLT_ENV_LORA_FOLD] = {"QLT_LORA_FOLD", "debugging: 0 adds each adapter by its own GEMMs instead of the LoRA "
                                             "group ops (CUDA; to bisect a wrong result)"},
    [QLT_ENV_LORA_DUDB] = {"QLT_LORA_DUDB", "debugging: the CUDA LoRA backward's du / dB: 0 two cuBLAS GEMMs a "
                                             "site, 1 the one-pass kernel (default), 2 that kernel a token block a "
                                             "launch"},
    [QLT_ENV_CUDA_CAPABILITY] = {"QLT_CUDA_CAPABILITY", "debugging: 8.0, 8.6, 8.9 or 9.0 makes the CUDA backend pick its "
                                                         "kernels as on a GPU of that compute capability (its "
                                                         "shared-memory limit; no Hopper-only path), to test "
                                                         "Ampere / Ada paths on a Hopper"},
    [QLT_ENV_DECODE_GRAPH] = {"QLT_DECODE_GRAPH", "measuring: 0 runs generation's one-token steps eagerly instead "
                                                   "of replaying the captured step (CUDA)"},
    [QLT_ENV_SWEEP_STOP_AFTER] = {"QLT_SWEEP_STOP_AFTER", "testing: N makes `qlora-train sweep` stop (exit status 3) "
                                                           "once N runs ended, as if interrupted, to test a restart"},
    [QLT_ENV_TEST_NAN_AT_STEP] = {"QLT_TEST_NAN_AT_STEP", "test hook: N (or N-M) puts a NaN into the gradient of "
                                                           "step N's (N..M's) first micro-batch (eager steps), to test that the step "
                                                           "is skipped"},
    [QLT_ENV_TEST_DEVICE_FAULT] = {"QLT_TEST_DEVICE_FAULT", "test hook: step:N:recoverable or step:N:sticky records "
                                                             "a device fault in the middle of step N, to test what "
                                                             "the trainer saves"},
    [QLT_ENV_TEST_FREE_BYTES] = {"QLT_TEST_FREE_BYTES", "test hook: N makes the memory plan take N bytes as the "
                                                         "device's free memory, to test that a run that does not "
                                                         "fit is refused with settings that fit"},
    [QLT_ENV_TEST_KILL_IN_SAVE] = {"QLT_TEST_KILL_IN_SAVE", "test hook: PHASE[:STEP] (PHASE adapter, optimizer, "
                                                             "state or rename) kills the process with SIGKILL at "
                                                             "that point of a checkpoint save (of step STEP)"},
    [QLT_ENV_RANK] = {"RANK", "data parallel: this process's rank, 0 .. WORLD_SIZE-1 (set by `train --gpus N` or a "
                              "torchrun-style launcher; docs/DISTRIBUTED.md)"},
    [QLT_ENV_WORLD_SIZE] = {"WORLD_SIZE", "data parallel: the number of ranks (processes, one GPU each)"},
    [QLT_ENV_LOCAL_RANK] = {"LOCAL_RANK", "data parallel: the GPU this rank uses on its machine (default: RANK)"},
    [QLT_ENV_MASTER_ADDR] = {"MASTER_ADDR", "data parallel: the address of rank 0's rendezvous (an IPv4 address "
                                            "or a host name)"},
    [QLT_ENV_MASTER_PORT] = {"MASTER_PORT", "data parallel: the TCP port of rank 0's rendezvous"},
    [QLT_ENV_OMPI_RANK] = {"OMPI_COMM_WORLD_RANK", "set by Open MPI's mpirun: this rank (the CPU path's data "
                                                    "parallel runs through MPI)"},
    [QLT_ENV_OMPI_SIZE] = {"OMPI_COMM_WORLD_SIZE", "set by Open MPI's mpirun: the number of ranks"},
    [QLT_ENV_OMPI_LOCAL_RANK] = {"OMPI_COMM_WORLD_LOCAL_RANK", "set by Open MPI's mpirun: the rank on this machine"},
};

const char *qlt_env(qlt_env_var v) {
    const char *value = getenv(vars[v].name);
    return value && value[0] ? value : NULL;
}

int qlt_env_flag(qlt_env_var v) {
    const char *value = qlt_env(v);
    return value && strcmp(value, "0") != 0;
}

const char *qlt_env_name(qlt_env_var v) { return vars[v].name; }
const char *qlt_env_help(qlt_env_var v) { return vars[v].help; }
