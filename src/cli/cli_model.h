/* cli_model.h: what the commands that run a trained model share (generate; eval-like uses): the backend for
 * train.device, the model of model.path with the config's NF4 settings, the PEFT adapter of a directory
 * (its own adapter_config.json gives r, alpha, targets), and the tokenizer (data.tokenizer, else the model's:
 * tokenizer.json beside it, or a .gguf file's own). */
#ifndef QLT_CLI_MODEL_H
#define QLT_CLI_MODEL_H

#include "backend/backend.h"
#include "config/config.h"
#include "model/lora.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct qlt_cli_model {
    qlt_backend *be;
    qlt_model model;
    int model_loaded;
    qlt_lora lora;
    int has_lora;
    qlt_tokenizer *tok; /* NULL unless asked for */
} qlt_cli_model;

/* adapter_dir: a PEFT adapter directory, or NULL for the config's lora.init_from (or none when that is empty).
 * 0, or -1 with qlt_fail (and cm closed). */
int qlt_cli_model_open(qlt_cli_model *cm, const qlt_config *cfg, const char *adapter_dir, int with_tokenizer);
void qlt_cli_model_close(qlt_cli_model *cm);

#endif
