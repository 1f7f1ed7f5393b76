/* env.h: every environment variable qlora-train reads, in one table. A knob a user turns is a config key
 * (docs/CONFIG.md); the variables here either name a place on this machine (QLT_CUDNN_LIBRARY), mirror a key
 * for convenience (CUDA_GRAPH), or switch a code path off for debugging and measuring (never needed for a
 * run). docs/CONFIG.md lists them; code reads them only through qlt_env. */
#ifndef QLT_ENV_H
#define QLT_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qlt_env_var {
    QLT_ENV_CUDA_GRAPH = 0, /* train.cuda_graph (a bool word; read by qlt_config_apply_env) */
    QLT_ENV_CUDNN_LIBRARY,  /* path of the libcudnn.so.9 to open (default: the loader's search) */
    QLT_ENV_CUDNN_RAGGED,   /* debugging: "1" runs one example a row through cuDNN's ragged layout too */
    QLT_ENV_LORA_FOLD,      /* debugging: "0" adds every adapter by its own GEMMs (no LoRA group ops) */
    QLT_ENV_LORA_DUDB,      /* debugging: the LoRA backward's du / dB: 0 cuBLAS, 1 one-pass kernel, 2 chunked */
    QLT_ENV_CUDA_CAPABILITY, /* debugging: "8.0", "8.6", ...: the CUDA backend picks kernels as on that compute capability */
    QLT_ENV_DECODE_GRAPH,   /* measuring: "0" runs generation's one-token steps eagerly instead of as a graph */
    QLT_ENV_SWEEP_STOP_AFTER, /* testing: "N": `sweep` starts no run after N runs ended (an interruption) */
    QLT_ENV_TEST_NAN_AT_STEP, /* test hook: "N" or "N-M": those steps' gradients get a NaN (eager) */
    QLT_ENV_TEST_DEVICE_FAULT, /* test hook: "step:N:recoverable|sticky": a device fault in the middle of step N */
    QLT_ENV_TEST_KILL_IN_SAVE, /* test hook: "PHASE[:STEP]": SIGKILL at that phase of a checkpoint save */
    QLT_ENV_TEST_FREE_BYTES,  /* test hook: "N": the memory plan takes N bytes as the device's free memory */
    QLT_ENV_RANK,             /* data parallel: this process's rank (torchrun-style launchers, `train --gpus N`) */
    QLT_ENV_WORLD_SIZE,       /* data parallel: the number of ranks */
    QLT_ENV_LOCAL_RANK,       /* data parallel: this process's GPU on its machine */
    QLT_ENV_MASTER_ADDR,      /* data parallel: rank 0's address (the rendezvous) */
    QLT_ENV_MASTER_PORT,      /* data parallel: rank 0's rendezvous port */
    QLT_ENV_OMPI_RANK,        /* mpirun (Open MPI): OMPI_COMM_WORLD_RANK */
    QLT_ENV_OMPI_SIZE,        /* mpirun (Open MPI): OMPI_COMM_WORLD_SIZE */
    QLT_ENV_OMPI_LOCAL_RANK,  /* mpirun (Open MPI): OMPI_COMM_WORLD_LOCAL_RANK */
    QLT_ENV_COUNT
} qlt_env_var;

/* The variable's value, or NULL when it is unset or empty. */
const char *qlt_env(qlt_env_var v);
/* 1 when the variable is set and not "0", else 0. */
int qlt_env_flag(qlt_env_var v);
/* Its name ("CUDA_GRAPH") and one line saying what it does (for `qlora-train help env`). */
const char *qlt_env_name(qlt_env_var v);
const char *qlt_env_help(qlt_env_var v);

#ifdef __cplusplus
}
#endif

#endif
