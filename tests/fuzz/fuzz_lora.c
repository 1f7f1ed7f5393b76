/* fuzz_lora.c: libFuzzer harness for the PEFT adapter loader (src/model/lora.c): the input is
 * adapter_config.json, then after a "\n--8<--\n" line adapter_model.safetensors. As lora.init_from does,
 * the adapter's own r / alpha / targets size the adapters created on the fixture tiny-qwen3 (CPU backend),
 * and its tensors are loaded into them.
 * With FUZZ_WRITE_SEED=FILE in the environment it writes a valid input (an adapter it saved) there and exits:
 * scripts/fuzz.sh makes the seed corpus that way. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "config/config.h"
#include "cpu/backend_cpu.h"
#include "fuzz_util.h"
#include "model/lora.h"

static qlt_backend *g_be;
static qlt_model g_model;

static void die(const char *what) {
    fprintf(stderr, "fuzz_lora: %s: %s\n", what, qlt_error());
    abort();
}

/* Concatenates dir/a, the separator, dir/b into out. */
static void write_seed(const char *out, const char *dir) {
    FILE *f = fopen(out, "wb");
    static const char *const kFiles[2] = {"adapter_config.json", "adapter_model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char *path = qlt_path_join(dir, kFiles[i]), *text = NULL;
        size_t len = 0;
        if (!f || qlt_read_file(path, &text, &len) != 0) die("seed");
        if (i) fputs("\n--8<--\n", f);
        fwrite(text, 1, len, f);
        free(text);
        free(path);
    }
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    g_be = qlt_backend_cpu_create(1, 1);
    qlt_model_load_opts opts = {.nf4 = 0, .nf4_blocksize = 64, .double_quant = 1};
    if (!g_be || qlt_model_load(&g_model, g_be, QLT_TEST_DATA "/fixtures/tiny-qwen3", &opts) != 0) die("model");
    const char *seed = getenv("FUZZ_WRITE_SEED");
    if (seed) {
        qlt_lora lora;
        if (qlt_lora_create(&lora, &g_model, 2, 4.0f, QLT_TARGET_Q | QLT_TARGET_V, 0, 0.0f) != 0) die("create");
        qlt_lora_init_default(&lora, 7);
        char *dir = qlt_path_join(fuzz_dir(), "seed");
        qlt_mkdirs(dir);
        if (qlt_lora_save_peft(&lora, &g_model.cfg, "tiny-qwen3", dir) != 0) die("save");
        write_seed(seed, dir);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *parts[2];
    size_t lens[2];
    int n = fuzz_split(data, size, parts, lens, 2);
    free(fuzz_write("adapter/adapter_config.json", parts[0], lens[0]));
    if (n > 1) free(fuzz_write("adapter/adapter_model.safetensors", parts[1], lens[1]));
    else fuzz_unlink("adapter/adapter_model.safetensors");
    char *dir = qlt_path_join(fuzz_dir(), "adapter");
    int r, rslora;
    float alpha, dropout;
    unsigned targets;
    int rc = qlt_lora_read_peft_config(dir, &r, &alpha, &targets, &rslora, &dropout);
    fuzz_check_error(rc);
    if (rc == 0) {
        qlt_lora lora;
        rc = qlt_lora_create(&lora, &g_model, r, alpha, targets, rslora, dropout);
        fuzz_check_error(rc);
        if (rc == 0) {
            fuzz_check_error(qlt_lora_load_peft(&lora, dir));
            qlt_lora_free(&lora);
        }
    }
    free(dir);
    return 0;
}
