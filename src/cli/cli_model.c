/* cli_model.c: see cli_model.h. */
#include "cli/cli_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "train/device.h"
#include "train/run_tokenizer.h"

int qlt_cli_model_open(qlt_cli_model *cm, const qlt_config *cfg, const char *adapter_dir, int with_tokenizer) {
    memset(cm, 0, sizeof *cm);
    if (!cfg->model.path || !cfg->model.path[0])
        return qlt_fail("model.path is empty: set it to a Hugging Face model directory, a .gguf file or "
                        "random:CONFIG.json, e.g. --set model.path=/models/Qwen2.5-7B");
    const char *adapter = adapter_dir ? adapter_dir : cfg->lora.init_from;
    /* the cheap checks first: the tokenizer and the adapter's config before the model is loaded */
    if (with_tokenizer && qlt_run_tokenizer_open(cfg, &cm->tok) != 0) goto fail;
    int r = 0, rslora = 0;
    float alpha = 0, dropout = 0;
    unsigned targets = 0;
    if (adapter && adapter[0] && qlt_lora_read_peft_config(adapter, &r, &alpha, &targets, &rslora, &dropout) != 0)
        goto fail;
    cm->be = qlt_device_backend_create(cfg->train.device, cfg->train.threads, cfg->train.cpu_reference);
    if (!cm->be) goto fail;
    {   /* train.dequant_cache_gib (a huge value: no limit) */
        double bytes = (double)cfg->train.dequant_cache_gib * 1073741824.0;
        cm->be->dequant_cache_bytes = bytes >= 4e18 ? (int64_t)4e18 : (int64_t)bytes;
    }
    qlt_model_load_opts opts = {.nf4 = cfg->model.quant == QLT_QUANT_NF4,
                                .nf4_blocksize = cfg->model.nf4_blocksize,
                                .double_quant = cfg->model.double_quant};
    if (qlt_model_open(&cm->model, cm->be, cfg->model.path, &opts, cfg->train.seed) != 0) goto fail;
    cm->model_loaded = 1;
    if (adapter && adapter[0]) {
        if (qlt_lora_create(&cm->lora, &cm->model, r, alpha, targets, rslora, 0.0f) != 0) goto fail;
        cm->has_lora = 1;
        if (qlt_lora_load_peft(&cm->lora, adapter) != 0) goto fail;
    }
    return 0;
fail:
    qlt_cli_model_close(cm);
    return -1;
}

void qlt_cli_model_close(qlt_cli_model *cm) {
    if (cm->has_lora) qlt_lora_free(&cm->lora);
    if (cm->model_loaded) qlt_model_free(&cm->model);
    if (cm->tok) qlt_tokenizer_free(cm->tok);
    if (cm->be) cm->be->destroy(cm->be);
    memset(cm, 0, sizeof *cm);
}
