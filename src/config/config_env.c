/* config_env.c: the environment variables that mirror a configuration key (today CUDA_GRAPH ->
 * train.cuda_graph), read strictly and applied as their own layer between the file and --set, so the value a
 * run uses is the one run_config.json records and `train --dry-run` shows as coming from the environment. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/env.h"
#include "common/error.h"
#include "config/config.h"

#define BOOL_WORDS "1/0, true/false, yes/no, on/off (any case)"

/* 1 or 0 for one of the bool words; -1 for anything else. */
static int bool_word(const char *s) {
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return 1;
        if (!strcasecmp(s, no[i])) return 0;
    }
    return -1;
}

static int key_index(const char *name) {
    for (int64_t i = 0; i < qlt_config_key_count(); i++)
        if (!strcmp(qlt_config_key_at(i)->name, name)) return (int)i;
    return -1;
}

int qlt_config_apply_env(qlt_config *cfg) {
    const char *value = qlt_env(QLT_ENV_CUDA_GRAPH);
    if (!value) return 0;
    int on = bool_word(value);
    if (on < 0)
        return qlt_fail("environment variable %s='%s': expected %s (it sets train.cuda_graph); unset it or "
                        "give one of those", qlt_env_name(QLT_ENV_CUDA_GRAPH), value, BOOL_WORDS);
    cfg->train.cuda_graph = on;
    int k = key_index("train.cuda_graph");
    QLT_ASSERT(k >= 0);
    cfg->origin[k] = (qlt_config_origin){QLT_ORIGIN_ENV, (int)QLT_ENV_CUDA_GRAPH};
    return 0;
}
