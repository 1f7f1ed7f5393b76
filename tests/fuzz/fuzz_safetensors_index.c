/* fuzz_safetensors_index.c: libFuzzer harness for a sharded model directory (src/formats/safetensors.c,
 * qlt_st_dir_open): the input is model.safetensors.index.json, then (after "\n--8<--\n" lines) up to two
 * shards, model-00001-of-00002.safetensors and model-00002-of-00002.safetensors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "fuzz_util.h"

static const char *const kNames[] = {"model/model.safetensors.index.json", "model/model-00001-of-00002.safetensors",
                                     "model/model-00002-of-00002.safetensors"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *parts[3];
    size_t lens[3];
    int n = fuzz_split(data, size, parts, lens, 3);
    for (int i = 0; i < 3; i++) {
        if (i < n) free(fuzz_write(kNames[i], parts[i], lens[i]));
        else fuzz_unlink(kNames[i]);
    }
    char *model = fuzz_write("model/.keep", NULL, 0); /* the directory's path (the empty file is ignored) */
    *strrchr(model, '/') = 0;
    qlt_st_dir d;
    int rc = qlt_st_dir_open(&d, model);
    fuzz_check_error(rc);
    if (rc == 0) {
        for (int f = 0; f < d.n_files; f++)
            for (int i = 0; i < d.files[f].n_tensors; i++)
                if (!qlt_st_dir_find(&d, d.files[f].tensors[i].name)) abort();
        qlt_st_dir_close(&d);
    }
    free(model);
    return 0;
}
