/* safetensors_shards.c: sharded safetensors output of a model directory (see safetensors_shards.h). */
#include "formats/safetensors_shards.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"

void qlt_st_shards_init(qlt_st_shards *s, const char *dir, int64_t max_bytes) {
    memset(s, 0, sizeof *s);
    s->dir = qlt_xstrdup(dir);
    s->max_bytes = max_bytes;
    s->weight_map = cJSON_CreateObject();
    qlt_st_writer_init(&s->w);
}

static int shard_flush(qlt_st_shards *s) {
    if (s->w.n == 0) return 0;
    char name[64];
    snprintf(name, sizeof name, "shard-%05d.tmp", s->n);
    char *path = qlt_path_join(s->dir, name);
    for (int i = 0; i < s->w.n; i++) cJSON_AddNumberToObject(s->weight_map, s->w.items[i].name, s->n);
    qlt_st_writer_set_metadata(&s->w, "{\"format\":\"pt\"}");
    int rc = qlt_st_writer_write(&s->w, path);
    free(path);
    qlt_st_writer_free(&s->w);
    qlt_st_writer_init(&s->w);
    s->w_bytes = 0;
    s->n++;
    return rc;
}

int qlt_st_shards_account(qlt_st_shards *s, int64_t bytes) {
    s->w_bytes += bytes;
    s->total_bytes += bytes;
    return s->w_bytes >= s->max_bytes ? shard_flush(s) : 0;
}

int qlt_st_shards_add(qlt_st_shards *s, const char *name, qlt_dtype dtype, int ndim, const int64_t *shape,
                      const void *data) {
    qlt_st_writer_add(&s->w, name, dtype, ndim, shape, data);
    return qlt_st_shards_account(s, (int64_t)s->w.items[s->w.n - 1].nbytes);
}

int qlt_st_shards_finish(qlt_st_shards *s) {
    QLT_TRY(shard_flush(s));
    char from[64], to[64];
    for (int k = 0; k < s->n; k++) {
        snprintf(from, sizeof from, "shard-%05d.tmp", k);
        if (s->n == 1) snprintf(to, sizeof to, "model.safetensors");
        else snprintf(to, sizeof to, "model-%05d-of-%05d.safetensors", k + 1, s->n);
        char *a = qlt_path_join(s->dir, from), *b = qlt_path_join(s->dir, to);
        int rc = rename(a, b);
        free(a);
        free(b);
        if (rc != 0) return qlt_fail("%s: cannot rename %s to %s: %s", s->dir, from, to, strerror(errno));
    }
    if (s->n <= 1) return 0;
    cJSON *index = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)s->total_bytes);
    cJSON *map = cJSON_AddObjectToObject(index, "weight_map");
    for (cJSON *it = s->weight_map->child; it; it = it->next) {
        snprintf(to, sizeof to, "model-%05d-of-%05d.safetensors", (int)it->valuedouble + 1, s->n);
        cJSON_AddStringToObject(map, it->string, to);
    }
    char *text = cJSON_Print(index);
    char *path = qlt_path_join(s->dir, "model.safetensors.index.json");
    int rc = qlt_write_file_atomic(path, text, strlen(text));
    free(path);
    free(text);
    cJSON_Delete(index);
    return rc;
}

void qlt_st_shards_free(qlt_st_shards *s) {
    qlt_st_writer_free(&s->w);
    cJSON_Delete(s->weight_map);
    free(s->dir);
    memset(s, 0, sizeof *s);
}
