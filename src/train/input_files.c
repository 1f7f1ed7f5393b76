/* input_files.c: see input_files.h. */
#include "train/input_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "formats/gguf.h"
#include "model/model.h"

/* 0 when path is a regular file this process can open for reading; else -1 with "KEY: PATH: why (hint)". */
static int readable_file(const char *key, const char *path, const char *hint) {
    struct stat st;
    const char *why = NULL;
    if (stat(path, &st) != 0) why = strerror(errno);
    else if (S_ISDIR(st.st_mode)) why = "is a directory, expected a file";
    else if (access(path, R_OK) != 0) why = strerror(errno);
    if (!why) return 0;
    return qlt_fail("%s: %s: %s%s%s%s", key, path, why, hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
}

static int check_list(const char *key, const qlt_path_list *files) {
    for (int i = 0; i < files->count; i++) QLT_TRY(readable_file(key, files->items[i], "one .jsonl or .jsonl.gz file"));
    return 0;
}

static int check_model(const char *path) {
    if (!strncmp(path, "random:", 7)) {
        if (!path[7]) return qlt_fail("model.path '%s' names no config.json: use random:path/to/config.json", path);
        return readable_file("model.path", path + 7, "random: takes a config.json");
    }
    struct stat st;
    if (stat(path, &st) != 0)
        return qlt_fail("model.path: %s: %s (a Hugging Face model directory, a .gguf file or random:CONFIG.json)",
                        path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return readable_file("model.path", path, NULL);
    char *config = qlt_path_join(path, "config.json");
    int rc = readable_file("model.path", config, "a Hugging Face model directory holds config.json");
    free(config);
    return rc;
}

/* The tokenizer.json the run reads, or NULL when it reads none (token data; a .gguf model's own). Heap. */
static char *tokenizer_path(const qlt_config *cfg, int training) {
    int needs = cfg->data.format != QLT_DATA_FORMAT_TOKENS ||
                (training && cfg->output.sample_prompt && cfg->output.sample_prompt[0]);
    if (!needs) return NULL;
    if (cfg->data.tokenizer && cfg->data.tokenizer[0]) return qlt_xstrdup(cfg->data.tokenizer);
    if (qlt_gguf_is_gguf(cfg->model.path)) return NULL;
    char *dir = qlt_model_dir_of(cfg->model.path);
    char *path = qlt_path_join(dir, "tokenizer.json");
    free(dir);
    return path;
}

int qlt_check_input_files(const qlt_config *cfg, int training) {
    QLT_TRY(check_model(cfg->model.path));
    char *tok = tokenizer_path(cfg, training);
    int rc = tok ? readable_file("data.tokenizer", tok,
                                 cfg->data.tokenizer && cfg->data.tokenizer[0]
                                     ? "a tokenizer.json"
                                     : "the tokenizer beside model.path; set data.tokenizer to another tokenizer.json")
                 : 0;
    free(tok);
    QLT_TRY(rc);
    if (training || cfg->data.eval.count == 0) QLT_TRY(check_list("data.train", &cfg->data.train));
    QLT_TRY(check_list("data.eval", &cfg->data.eval));
    const char *adapter = cfg->lora.init_from;
    if (adapter && adapter[0]) {
        if (!qlt_dir_exists(adapter))
            return qlt_fail("lora.init_from: %s: not a directory (a PEFT adapter directory, e.g. runs/demo/final)", adapter);
        const char *files[] = {"adapter_config.json", "adapter_model.safetensors"};
        for (int i = 0; i < 2; i++) {
            char *path = qlt_path_join(adapter, files[i]);
            rc = readable_file("lora.init_from", path, "a PEFT adapter directory holds both adapter files");
            free(path);
            QLT_TRY(rc);
        }
    }
    return 0;
}
