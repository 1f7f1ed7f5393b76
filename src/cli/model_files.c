/* model_files.c: see model_files.h. */
#include "cli/model_files.h"

#include <stdlib.h>

#include "common/fileutil.h"

static const char *const model_files[] = {"tokenizer.json",         "tokenizer_config.json", "special_tokens_map.json",
                                          "generation_config.json", "tokenizer.model",       "vocab.json",
                                          "merges.txt",             "added_tokens.json",     "chat_template.jinja"};

int qlt_cli_copy_model_files(const char *in_dir, const char *out_dir) {
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof model_files / sizeof *model_files; i++) {
        char *src = qlt_path_join(in_dir, model_files[i]);
        if (qlt_file_exists(src)) {
            char *data = NULL, *dst = qlt_path_join(out_dir, model_files[i]);
            size_t len = 0;
            rc = qlt_read_file(src, &data, &len);
            if (rc == 0) rc = qlt_write_file_atomic(dst, data, len);
            free(data);
            free(dst);
        }
        free(src);
    }
    return rc;
}
