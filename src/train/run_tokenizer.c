/* run_tokenizer.c: see run_tokenizer.h. */
#include "train/run_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "formats/gguf.h"
#include "formats/gguf_tokenizer.h"
#include "model/model.h"

int qlt_run_tokenizer_open(const qlt_config *cfg, qlt_tokenizer **out) {
    *out = NULL;
    const int given = cfg->data.tokenizer && cfg->data.tokenizer[0];
    if (!given && qlt_gguf_is_gguf(cfg->model.path)) /* a GGUF model's own tokenizer */
        return qlt_gguf_tokenizer_load_file(out, cfg->model.path) == 0
                   ? 0
                   : qlt_fail_context("the tokenizer of model.path (set data.tokenizer to use another)");
    char *path;
    if (given) {
        path = qlt_xstrdup(cfg->data.tokenizer);
    } else {
        char *dir = qlt_model_dir_of(cfg->model.path);
        path = qlt_xmalloc(strlen(dir) + 32);
        sprintf(path, "%s/tokenizer.json", dir);
        free(dir);
    }
    int rc = qlt_tokenizer_load(out, path);
    free(path);
    return rc == 0 ? 0 : qlt_fail_context("data.tokenizer");
}
