/* test_fuzz_found.c: the inputs the libFuzzer harnesses (tests/fuzz, scripts/fuzz.sh) found that crashed or
 * misreported, cut down to what triggers each: every one must now fail with one line naming the file and
 * the problem (docs/RELIABILITY.md lists them). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "config/config.h"
#include "model/model_config.h"
#include "formats/safetensors.h"
#include "test_util.h"

/* The recorded error is one line that holds each of the needles. */
static void expect_line(const char *needle1, const char *needle2) {
    const char *e = qlt_error();
    cr_expect(e[0] != 0, "an error was recorded");
    cr_expect(strchr(e, '\n') == NULL && strchr(e, '\r') == NULL, "one line: %s", e);
    cr_expect(strstr(e, needle1) != NULL, "error mentions '%s': %s", needle1, e);
    if (needle2) cr_expect(strstr(e, needle2) != NULL, "error mentions '%s': %s", needle2, e);
}

/* fuzz_safetensors_index: a weight_map value that is not a string was named in the message after the
 * parsed index had been freed (heap use after free). */
Test(fuzz_found, index_weight_map_value_not_a_string) {
    char *dir = test_tmpdir();
    char *index = qlt_path_join(dir, "model.safetensors.index.json");
    test_write_text(index, "{\"weight_map\": {\"model.a\": \"a.safetensors\", \"model.b\": [1, 2]}}");
    qlt_st_dir d;
    cr_expect_eq(qlt_st_dir_open(&d, dir), -1);
    expect_line(index, "weight_map['model.b'] is not a file name");
    qlt_remove_tree(dir);
    free(index);
    free(dir);
}

/* fuzz_model_config, fuzz_config_json, fuzz_chat_template: a key or name quoted from the input that holds
 * a newline split the error over two lines; control characters are now written as escapes. */
Test(fuzz_found, architecture_with_newline_is_escaped) {
    qlt_model_config mc;
    cr_expect_eq(qlt_model_config_parse(&mc, "{\"architectures\": [\"LlamaForCausl L\\nM a\"]}", "x/config.json"), -1);
    expect_line("x/config.json", "LlamaForCausl L\\nM a");
}

Test(fuzz_found, config_key_with_newline_is_escaped) {
    char *dir = test_tmpdir();
    char *path = qlt_path_join(dir, "run.json");
    test_write_text(path, "{\"model\": {\"double_qu\\nt\": true}}");
    qlt_config cfg;
    qlt_config_defaults(&cfg);
    cr_expect_eq(qlt_config_load_file(&cfg, path), -1);
    expect_line(path, "unknown key 'model.double_qu\\nt'");
    qlt_config_free(&cfg);
    qlt_remove_tree(dir);
    free(path);
    free(dir);
}

Test(fuzz_found, error_line_escapes_every_control_character) {
    qlt_fail("a\tb\rc\x01" "d\x7f" "e");
    cr_expect_str_eq(qlt_error(), "a\\tb\\rc\\x01d\\x7fe");
    qlt_fail_context("ctx\n");
    cr_expect_str_eq(qlt_error(), "ctx\\n: a\\tb\\rc\\x01d\\x7fe");
}
