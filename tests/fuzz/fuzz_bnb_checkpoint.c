/* fuzz_bnb_checkpoint.c: libFuzzer harness for model directories, bitsandbytes 4-bit checkpoints first
 * (src/formats/bnb_checkpoint.c through src/model/model.c): the input is config.json, then after a
 * "\n--8<--\n" line model.safetensors; the directory is loaded onto the CPU backend as model.quant nf4 would
 * load it (a quantization_config in config.json makes it a bitsandbytes checkpoint, read as stored). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "cpu/backend_cpu.h"
#include "fuzz_util.h"
#include "model/model.h"

static qlt_backend *g_be;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    g_be = qlt_backend_cpu_create(1, 1);
    if (!g_be) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *parts[2];
    size_t lens[2];
    int n = fuzz_split(data, size, parts, lens, 2);
    free(fuzz_write("model/config.json", parts[0], lens[0]));
    if (n > 1) free(fuzz_write("model/model.safetensors", parts[1], lens[1]));
    else fuzz_unlink("model/model.safetensors");
    char *dir = qlt_path_join(fuzz_dir(), "model");
    qlt_model m;
    qlt_model_load_opts opts = {.nf4 = 1, .nf4_blocksize = 64, .double_quant = 1};
    int rc = qlt_model_load(&m, g_be, dir, &opts);
    fuzz_check_error(rc);
    if (rc == 0) qlt_model_free(&m);
    free(dir);
    return 0;
}
