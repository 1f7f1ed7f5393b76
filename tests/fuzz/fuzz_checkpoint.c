/* fuzz_checkpoint.c: libFuzzer harness for the checkpoint loader (src/train/checkpoint.c, checkpoint_verify.c):
 * the input is trainer_state.json, adapter_config.json, adapter_model.safetensors and optimizer.safetensors,
 * separated by "\n--8<--\n" lines, loaded by qlt_checkpoint_load into a trainer made once (the fixture
 * tiny-qwen3 on the CPU, LoRA r 2 on q and v, a tokens dataset). When trainer_state.json is an object without
 * "files", the harness records the files it wrote there (as a save does), so that mutations get past the
 * CRC check to the parsers behind it; with "files", the record given is checked.
 * With FUZZ_WRITE_SEED=FILE in the environment it writes a valid input (a checkpoint it saved, "files" left
 * out) there and exits: how tests/fuzz/checkpoint/ was made. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "config/config.h"
#include "fuzz_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_verify.h"
#include "train/trainer.h"

static qlt_config g_cfg;
static qlt_trainer g_t;

static const char *const kFiles[4] = {"trainer_state.json", "adapter_config.json", "adapter_model.safetensors",
                                      "optimizer.safetensors"};

static void die(const char *what) {
    fprintf(stderr, "fuzz_checkpoint: %s: %s\n", what, qlt_error());
    abort();
}

static void write_seed(const char *out, const char *dir) {
    FILE *f = fopen(out, "wb");
    for (int i = 0; i < 4; i++) {
        char *path = qlt_path_join(dir, kFiles[i]), *text = NULL;
        size_t len = 0;
        if (!f || qlt_read_file(path, &text, &len) != 0) die("seed");
        if (i == 0) {
            cJSON *s = cJSON_Parse(text);
            cJSON_DeleteItemFromObjectCaseSensitive(s, "files");
            free(text);
            text = cJSON_Print(s);
            len = strlen(text);
            cJSON_Delete(s);
        }
        if (i) fputs("\n--8<--\n", f);
        fwrite(text, 1, len, f);
        free(text);
        free(path);
    }
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    char *train = qlt_path_join(fuzz_dir(), "train.jsonl");
    FILE *f = fopen(train, "w");
    for (int row = 0; row < 8; row++) {
        fprintf(f, "{\"input_ids\": [");
        for (int i = 0; i < 16; i++) fprintf(f, "%s%d", i ? ", " : "", (row * 31 + i * 7) % 256);
        fprintf(f, "]}\n");
    }
    fclose(f);
    char *out = qlt_path_join(fuzz_dir(), "run");
    const char *sets[] = {"model.path=" QLT_TEST_DATA "/fixtures/tiny-qwen3", "model.quant=none", "lora.r=2",
                          "lora.alpha=4", "lora.targets=[q, v]", "data.format=tokens", "data.seq_len=16",
                          "data.cache=false", "train.device=cpu", "train.threads=1", "train.micro_batch=2",
                          "train.grad_accum=1", "train.log_every=1000"};
    qlt_config_defaults(&g_cfg);
    char buf[4096];
    snprintf(buf, sizeof buf, "data.train=[%s]", train);
    if (qlt_config_set(&g_cfg, buf) != 0) die("config");
    snprintf(buf, sizeof buf, "output.dir=%s", out);
    if (qlt_config_set(&g_cfg, buf) != 0) die("config");
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        if (qlt_config_set(&g_cfg, sets[i]) != 0) die(sets[i]);
    if (qlt_config_validate(&g_cfg) != 0 || qlt_trainer_init(&g_t, &g_cfg, QLT_TRAINER_TRAIN) != 0) die("trainer");
    const char *seed = getenv("FUZZ_WRITE_SEED");
    if (seed) {
        char *dir = qlt_path_join(fuzz_dir(), "seed");
        if (qlt_checkpoint_save(&g_t, dir) != 0) die("save");
        write_seed(seed, dir);
        exit(0);
    }
    free(train);
    free(out);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *parts[4];
    size_t lens[4];
    int n = fuzz_split(data, size, parts, lens, 4);
    char names[4][64];
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof names[i], "ckpt/%s", kFiles[i]);
        if (i < n) free(fuzz_write(names[i], parts[i], lens[i]));
        else fuzz_unlink(names[i]);
    }
    char *dir = qlt_path_join(fuzz_dir(), "ckpt");
    /* "files" left out: record what was written, as qlt_checkpoint_save would */
    char *text = strndup((const char *)parts[0], lens[0]);
    cJSON *s = cJSON_Parse(text);
    free(text);
    if (cJSON_IsObject(s) && !cJSON_GetObjectItemCaseSensitive(s, "files")) {
        cJSON *files = qlt_ckpt_files_record(dir);
        if (files) {
            cJSON_AddItemToObject(s, "files", files);
            char *json = cJSON_PrintUnformatted(s);
            free(fuzz_write(names[0], (const uint8_t *)json, strlen(json)));
            free(json);
        }
    }
    cJSON_Delete(s);
    qlt_run_state saved = g_t.run;
    int64_t step = g_t.step, epoch = g_t.epoch, cursor = g_t.cursor, tokens = g_t.tokens_seen;
    fuzz_check_error(qlt_checkpoint_load(&g_t, dir));
    g_t.run = saved, g_t.step = step, g_t.epoch = epoch, g_t.cursor = cursor, g_t.tokens_seen = tokens;
    free(dir);
    return 0;
}
