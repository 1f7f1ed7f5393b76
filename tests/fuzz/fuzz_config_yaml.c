/* fuzz_config_yaml.c: libFuzzer harness for the YAML run configuration (src/config/config_yaml.c and the
 * schema it is applied through): the input is a run.yaml; what loads is validated and written back as JSON. */
#include <stdint.h>
#include <stdlib.h>

#include "config/config.h"
#include "fuzz_util.h"

#ifndef FUZZ_CONFIG_NAME
#define FUZZ_CONFIG_NAME "run.yaml"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *path = fuzz_write(FUZZ_CONFIG_NAME, data, size);
    qlt_config cfg;
    qlt_config_defaults(&cfg);
    int rc = qlt_config_load_file(&cfg, path);
    fuzz_check_error(rc);
    if (rc == 0) {
        fuzz_check_error(qlt_config_validate(&cfg));
        for (int64_t i = 0; i < qlt_config_key_count(); i++) free(qlt_config_value_text(&cfg, i));
    }
    qlt_config_free(&cfg);
    free(path);
    return 0;
}
