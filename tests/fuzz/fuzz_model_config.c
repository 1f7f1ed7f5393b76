/* fuzz_model_config.c: libFuzzer harness for config.json (src/model/model_config.c): the input is the file's
 * text. What parses is used as the loader uses it (RoPE frequencies, parameter counts), so a value the
 * validation let through that overflows or divides by zero shows up here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    qlt_model_config mc;
    int rc = qlt_model_config_parse(&mc, text, "fuzz/config.json");
    fuzz_check_error(rc);
    if (rc == 0) {
        float inv_freq[QLT_MAX_ROPE_FACTORS * 2];
        if (mc.head_dim / 2 <= (int)(sizeof inv_freq / sizeof inv_freq[0])) qlt_model_rope_inv_freq(&mc, inv_freq);
        (void)qlt_model_attn_scale(&mc);
        (void)qlt_model_total_params(&mc);
    }
    free(text);
    return 0;
}
