/* fuzz_config_json.c: libFuzzer harness for the JSON run configuration (src/config/config_json.c): the
 * same harness as fuzz_config_yaml.c, with the input written as run.json. */
#define FUZZ_CONFIG_NAME "run.json"
#include "fuzz_config_yaml.c"
