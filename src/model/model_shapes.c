/* model_shapes.c: the model model.path names as shapes and formats only, for the memory plan a run makes before
 * it loads anything (src/train/memory_plan.c): the architecture is read from config.json, the GGUF metadata or
 * random:'s config, and the layers are built by the random-weight builder with no values, on a backend that is
 * planning (so its allocations are counted, not made). */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "formats/bnb_checkpoint.h"
#include "formats/gguf.h"
#include "model/gemma_model.h"
#include "model/model.h"

#define RANDOM_PREFIX "random:"

static int config_of(const char *path, qlt_model_config *mc, int *pre_quantized, int *double_quant) {
    *pre_quantized = 0;
    if (strncmp(path, RANDOM_PREFIX, strlen(RANDOM_PREFIX)) == 0) {
        const char *config_path = path + strlen(RANDOM_PREFIX);
        char *text = NULL;
        QLT_TRY(qlt_read_file(config_path, &text, NULL));
        int rc = qlt_model_config_parse(mc, text, config_path);
        free(text);
        return rc;
    }
    if (qlt_gguf_is_gguf(path)) {
        qlt_gguf g;
        QLT_TRY(qlt_gguf_open(&g, path));
        int rc = qlt_model_config_from_gguf(mc, &g);
        qlt_gguf_close(&g);
        return rc;
    }
    QLT_TRY(qlt_model_config_load(mc, path));
    qlt_bnb_config bnb;
    int quantized = qlt_bnb_detect(path, &bnb);
    if (quantized < 0) return -1;
    *pre_quantized = quantized;
    if (quantized) *double_quant = bnb.double_quant;
    return 0;
}

int qlt_model_init_shapes(qlt_model *m, qlt_backend *be, const char *path, const qlt_model_load_opts *opts) {
    qlt_model_config mc;
    qlt_model_load_opts o = *opts;
    int pre_quantized = 0;
    QLT_TRY(config_of(path, &mc, &pre_quantized, &o.double_quant));
    if (pre_quantized) { /* bitsandbytes checkpoints store NF4 in blocks of 64 */
        o.nf4 = 1;
        o.nf4_blocksize = 64;
    }
    o.shapes_only = 1;
    /* what the backend cannot run is refused here, naming model.path (the load would refuse it the same way) */
    QLT_TRY(qlt_model_check_backend(&mc, be, path));
    QLT_TRY(qlt_gemma_backend_check(&mc, be, path));
    return qlt_model_init_random(m, be, &mc, 0, &o);
}
