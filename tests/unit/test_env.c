/* test_env.c: the environment variables' table (src/common/env.h): every variable has a distinct name and a
 * help line, unset and empty read as absent, and a flag is on for any value but "0". The names are what
 * docs/CONFIG.md lists, so the test also reads that file and finds each name there. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/fileutil.h"

Test(env, table_is_complete) {
    for (int i = 0; i < QLT_ENV_COUNT; i++) {
        const char *name = qlt_env_name((qlt_env_var)i), *help = qlt_env_help((qlt_env_var)i);
        cr_assert(name && name[0], "variable %d has no name", i);
        cr_assert(help && strlen(help) > 10, "%s has no help line", name);
        for (int j = 0; j < i; j++) cr_assert_str_neq(name, qlt_env_name((qlt_env_var)j));
    }
}

Test(env, values_and_flags) {
    const char *name = qlt_env_name(QLT_ENV_LORA_FOLD);
    unsetenv(name);
    cr_assert_null(qlt_env(QLT_ENV_LORA_FOLD));
    cr_assert_eq(qlt_env_flag(QLT_ENV_LORA_FOLD), 0);
    setenv(name, "", 1);
    cr_assert_null(qlt_env(QLT_ENV_LORA_FOLD), "an empty value reads as unset");
    setenv(name, "0", 1);
    cr_assert_str_eq(qlt_env(QLT_ENV_LORA_FOLD), "0");
    cr_assert_eq(qlt_env_flag(QLT_ENV_LORA_FOLD), 0);
    setenv(name, "yes", 1);
    cr_assert_eq(qlt_env_flag(QLT_ENV_LORA_FOLD), 1);
    unsetenv(name);
}

Test(env, documented_in_config_md) {
    char *doc = NULL;
    size_t len = 0;
    cr_assert_eq(qlt_read_file(QLT_TEST_DATA "/../../docs/CONFIG.md", &doc, &len), 0);
    for (int i = 0; i < QLT_ENV_COUNT; i++) {
        char quoted[64];
        snprintf(quoted, sizeof quoted, "`%s`", qlt_env_name((qlt_env_var)i));
        cr_assert(strstr(doc, quoted), "docs/CONFIG.md does not list %s", quoted);
    }
    free(doc);
}
