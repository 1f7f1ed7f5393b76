/* fuzz_util.c: the temporary files, the input splitting and the error-line check the harnesses share
 * (fuzz_util.h). */
#define _GNU_SOURCE
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "tokenizer/tokenizer.h"

static char *g_dir;

static void remove_dir(void) {
    if (g_dir) qlt_remove_tree(g_dir);
}

const char *fuzz_dir(void) {
    if (!g_dir) {
        char tmpl[] = "/tmp/qlt-fuzz-XXXXXX";
        if (!mkdtemp(tmpl)) {
            perror("mkdtemp");
            abort();
        }
        g_dir = strdup(tmpl);
        atexit(remove_dir);
    }
    return g_dir;
}

char *fuzz_write(const char *name, const uint8_t *data, size_t len) {
    char *path = qlt_path_join(fuzz_dir(), name);
    char *slash = strrchr(path, '/');
    *slash = 0;
    qlt_mkdirs(path);
    *slash = '/';
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

void fuzz_unlink(const char *name) {
    char *path = qlt_path_join(fuzz_dir(), name);
    unlink(path);
    free(path);
}

int fuzz_split(const uint8_t *data, size_t size, const uint8_t **parts, size_t *lens, int max) {
    static const char sep[] = "\n--8<--\n";
    const size_t sl = sizeof sep - 1;
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; n < max - 1 && i + sl <= size; i++) {
        if (memcmp(data + i, sep, sl) == 0) {
            parts[n] = data + start;
            lens[n++] = i - start;
            start = i + sl;
            i = start - 1;
        }
    }
    parts[n] = data + start;
    lens[n++] = size - start;
    return n;
}

void fuzz_check_error(int rc) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "fuzz: %s\n", rc == 0 ? "accepted" : qlt_error());
    if (rc == 0) return;
    const char *e = qlt_error();
    if (!e[0] || strchr(e, '\n')) {
        fprintf(stderr, "fuzz: a rejection must be one non-empty line, got: \"%s\"\n", e);
        abort();
    }
}

struct qlt_tokenizer *fuzz_fixture_tokenizer(const char *fixture, int llama3) {
    char path[4096];
    snprintf(path, sizeof path, "%s/fixtures/%s/tokenizer.json", QLT_TEST_DATA, fixture);
    char *text;
    size_t len;
    if (qlt_read_file(path, &text, &len) != 0) goto fail;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    cJSON *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
    if (!cJSON_IsArray(added)) goto fail;
    static const char *const kLlama3[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                          "<|eot_id|>"};
    int next = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, added) {
        int id = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "id"));
        if (id >= next) next = id + 1;
    }
    for (int i = 0; llama3 && i < 4; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", next + i);
        cJSON_AddStringToObject(t, "content", kLlama3[i]);
        cJSON_AddBoolToObject(t, "single_word", 0);
        cJSON_AddBoolToObject(t, "lstrip", 0);
        cJSON_AddBoolToObject(t, "rstrip", 0);
        cJSON_AddBoolToObject(t, "normalized", 0);
        cJSON_AddBoolToObject(t, "special", 1);
        cJSON_AddItemToArray(added, t);
    }
    char *json = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    struct qlt_tokenizer *tok = NULL;
    int rc = qlt_tokenizer_load_json(&tok, json, strlen(json), path);
    free(json);
    if (rc == 0) return tok;
fail:
    fprintf(stderr, "fuzz: cannot load %s: %s\n", path, qlt_error());
    abort();
}
