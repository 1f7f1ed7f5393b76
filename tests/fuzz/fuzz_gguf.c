/* fuzz_gguf.c: libFuzzer harness for the GGUF reader (src/formats/gguf.c, gguf_dequant.c, gguf_tokenizer.c,
 * and the model built from its metadata, src/model/model_gguf.c): the input is one .gguf file. What opens
 * has every metadata value and every tensor read (dequantized where the type allows), its tokenizer rebuilt
 * as tokenizer.json and loaded, and the model loaded onto the CPU backend as NF4. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "cpu/backend_cpu.h"
#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "formats/gguf_tokenizer.h"
#include "fuzz_util.h"
#include "model/model.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

static qlt_backend *g_be;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    g_be = qlt_backend_cpu_create(1, 1);
    if (!g_be) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *path = fuzz_write("model.gguf", data, size);
    qlt_gguf g;
    int rc = qlt_gguf_open(&g, path);
    fuzz_check_error(rc);
    if (rc != 0) {
        free(path);
        return 0;
    }
    for (int64_t i = 0; i < g.n_tensors; i++) {
        const qlt_gguf_tensor *t = &g.tensors[i];
        if (qlt_gguf_find_tensor(&g, t->name) == NULL) abort();
        char shape[128];
        qlt_gguf_format_shape(shape, sizeof shape, t);
        if (!qlt_gguf_can_dequantize(t->type) || t->numel > (1 << 20)) continue;
        float *buf = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
        fuzz_check_error(qlt_gguf_tensor_to_f32(&g, t, buf));
        free(buf);
    }
    for (int64_t i = 0; i < g.n_kv; i++) {
        const qlt_gguf_kv *kv = &g.kv[i];
        if (qlt_gguf_find_kv(&g, kv->key) == NULL) abort();
        if (kv->type == QLT_GGUF_VAL_ARRAY && kv->elem_type != QLT_GGUF_VAL_STRING &&
            kv->elem_type != QLT_GGUF_VAL_ARRAY && kv->elem_type != QLT_GGUF_VAL_BOOL)
            for (uint64_t j = 0; j < kv->count && j < 64; j++) {
                if (kv->elem_type == QLT_GGUF_VAL_F32 || kv->elem_type == QLT_GGUF_VAL_F64)
                    (void)qlt_gguf_array_float(kv, j);
                else
                    (void)qlt_gguf_array_int(kv, j);
            }
    }
    char *json = NULL, *config = NULL;
    rc = qlt_gguf_tokenizer_json(&g, &json, &config);
    fuzz_check_error(rc);
    free(json);
    free(config);
    qlt_tokenizer *tok = NULL;
    rc = qlt_gguf_tokenizer_load(&tok, &g);
    fuzz_check_error(rc);
    if (rc == 0) {
        qlt_ids ids = {0};
        fuzz_check_error(qlt_tokenizer_encode(tok, "Hello world! <|im_start|>", 25, &ids));
        free(ids.data);
        qlt_tokenizer_free(tok);
    }
    qlt_model_config mc;
    rc = qlt_model_config_from_gguf(&mc, &g);
    fuzz_check_error(rc);
    qlt_gguf_close(&g);
    if (rc == 0) {
        qlt_model m;
        qlt_model_load_opts opts = {.nf4 = 1, .nf4_blocksize = 64, .double_quant = 1};
        rc = qlt_model_load_gguf(&m, g_be, path, &opts);
        fuzz_check_error(rc);
        if (rc == 0) qlt_model_free(&m);
    }
    free(path);
    return 0;
}
