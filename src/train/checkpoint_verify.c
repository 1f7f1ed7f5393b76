/* checkpoint_verify.c: see checkpoint_verify.h. */
#define _GNU_SOURCE
#include "train/checkpoint_verify.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "common/hash.h"
#include "formats/gguf.h"
#include "model/model.h"

/* Size and CRC-32 of the file at path (read in 1 MiB pieces); with do_fsync, the file is fsynced too. */
static int file_crc(const char *path, int do_fsync, int64_t *bytes, uint32_t *crc_out) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return qlt_fail("%s: cannot read: %s", path, strerror(errno));
    enum { PIECE = 1 << 20 };
    unsigned char *buf = qlt_xmalloc(PIECE);
    uLong crc = crc32(0L, Z_NULL, 0);
    int64_t total = 0;
    ssize_t got;
    while ((got = read(fd, buf, PIECE)) > 0) {
        crc = crc32(crc, buf, (uInt)got);
        total += got;
    }
    int rc = got < 0 ? qlt_fail("%s: read failed: %s", path, strerror(errno)) : 0;
    if (rc == 0 && do_fsync && fsync(fd) != 0) rc = qlt_fail("%s: fsync failed: %s", path, strerror(errno));
    free(buf);
    close(fd);
    *bytes = total;
    *crc_out = (uint32_t)crc;
    return rc;
}

cJSON *qlt_ckpt_files_record(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        qlt_fail("%s: cannot list: %s", dir, strerror(errno));
        return NULL;
    }
    cJSON *files = cJSON_CreateObject();
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "trainer_state.json") == 0) continue;
        char *path = qlt_path_join(dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            int64_t bytes;
            uint32_t crc;
            rc = file_crc(path, 1, &bytes, &crc);
            if (rc == 0) {
                char hex[9];
                snprintf(hex, sizeof hex, "%08" PRIx32, crc);
                cJSON *entry = cJSON_AddObjectToObject(files, e->d_name);
                cJSON_AddNumberToObject(entry, "bytes", (double)bytes);
                cJSON_AddStringToObject(entry, "crc32", hex);
            }
        }
        free(path);
    }
    closedir(d);
    if (rc != 0) {
        cJSON_Delete(files);
        return NULL;
    }
    return files;
}

int qlt_ckpt_files_verify(const char *dir, const cJSON *files) {
    if (!cJSON_IsObject(files))
        return qlt_fail("%s/trainer_state.json: 'files' is not a map of name -> {bytes, crc32} (corrupt checkpoint?): "
                        "resume from another checkpoint (--resume DIR)", dir);
    const cJSON *entry;
    cJSON_ArrayForEach(entry, files) {
        const char *name = entry->string;
        const cJSON *want_bytes = cJSON_GetObjectItemCaseSensitive(entry, "bytes");
        const cJSON *want_crc = cJSON_GetObjectItemCaseSensitive(entry, "crc32");
        if (!name || strchr(name, '/') || !cJSON_IsNumber(want_bytes) || !cJSON_IsString(want_crc))
            return qlt_fail("%s/trainer_state.json: 'files' entry '%s' is not {bytes, crc32} (corrupt checkpoint?): "
                            "resume from another checkpoint (--resume DIR)", dir, name ? name : "?");
        char *path = qlt_path_join(dir, name);
        int64_t bytes = 0;
        uint32_t crc = 0;
        int rc = 0;
        if (!qlt_file_exists(path)) {
            rc = qlt_fail("%s: %s is missing (the checkpoint recorded it): this checkpoint is incomplete; resume from "
                          "an earlier one (--resume DIR) or delete it", dir, name);
        } else if (file_crc(path, 0, &bytes, &crc) != 0) {
            rc = -1;
        } else if ((double)bytes != want_bytes->valuedouble) {
            rc = qlt_fail("%s: %s has %lld bytes but trainer_state.json records %.0f: the file was damaged or changed "
                          "after the checkpoint was written; resume from an earlier checkpoint (--resume DIR) or "
                          "delete this one", dir, name, (long long)bytes, want_bytes->valuedouble);
        } else {
            char hex[9];
            snprintf(hex, sizeof hex, "%08" PRIx32, crc);
            if (strcmp(hex, want_crc->valuestring) != 0)
                rc = qlt_fail("%s: %s has CRC-32 %s but trainer_state.json records %s: the file was damaged or "
                              "changed after the checkpoint was written; resume from an earlier checkpoint (--resume "
                              "DIR) or delete this one", dir, name, hex, want_crc->valuestring);
        }
        free(path);
        if (rc != 0) return -1;
    }
    return 0;
}

void qlt_ckpt_model_fingerprint(const qlt_model_config *mc, char out[17]) {
    /* the values one by one (not the struct's bytes: padding and unused RoPE factors would enter the hash) */
    int64_t v[] = {mc->arch,           mc->hidden,  mc->n_layers,  mc->n_heads,          mc->n_kv_heads,
                   mc->head_dim,       mc->intermediate, mc->vocab, mc->tie_word_embeddings, mc->attention_bias,
                   mc->qk_norm,        mc->sliding_window, mc->rope_type, mc->rope_original_max_pos};
    uint64_t h = qlt_hash64(v, sizeof v, 0x6d6f64656cull);
    h = qlt_hash64(mc->arch_name, strlen(mc->arch_name), h);
    double d[] = {mc->rms_eps, mc->rope_theta, mc->rope_factor, mc->rope_low_freq_factor, mc->rope_high_freq_factor};
    h = qlt_hash64(d, sizeof d, h);
    /* the frozen tensors: embeddings [vocab, hidden], every projection [out, in] of every layer */
    int64_t embed[2] = {mc->vocab, mc->hidden};
    h = qlt_hash64(embed, sizeof embed, h);
    for (int layer = 0; layer < mc->n_layers; layer++)
        for (int p = 0; p < 7; p++) {
            int64_t shape[2];
            qlt_model_proj_shape(mc, p, &shape[0], &shape[1]);
            h = qlt_hash64(shape, sizeof shape, h);
        }
    snprintf(out, 17, "%016" PRIx64, h);
}

void qlt_ckpt_tokenizer_id(const qlt_config *cfg, char out[24]) {
    const int given = cfg->data.tokenizer && cfg->data.tokenizer[0];
    if (cfg->data.format == QLT_DATA_FORMAT_TOKENS) {
        snprintf(out, 24, "none");
        return;
    }
    if (given ? qlt_gguf_is_gguf(cfg->data.tokenizer) : qlt_gguf_is_gguf(cfg->model.path)) { /* not hashed: GBs */
        snprintf(out, 24, "model");
        return;
    }
    char *path;
    if (given) {
        path = qlt_xstrdup(cfg->data.tokenizer);
    } else {
        char *dir = qlt_model_dir_of(cfg->model.path);
        path = qlt_path_join(dir, "tokenizer.json");
        free(dir);
    }
    char *text = NULL;
    size_t len = 0;
    if (qlt_read_file(path, &text, &len) == 0) {
        snprintf(out, 24, "%016" PRIx64, qlt_hash64(text, len, 0x746f6bull));
    } else {
        qlt_error_clear();
        snprintf(out, 24, "unreadable");
    }
    free(text);
    free(path);
}
