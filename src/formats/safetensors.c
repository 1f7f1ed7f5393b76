/* safetensors.c: validated mmap reader, sharded-directory lookup and atomic writer (see safetensors.h).
 * Format: 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data area; offsets are relative to the data area. */
#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const qlt_st_tensor *)a)->name, ((const qlt_st_tensor *)b)->name);
}

typedef struct span {
    uint64_t begin, end;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

/* Reads a JSON number that must be a non-negative integer (exactly representable). */
static int json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return -1;
    double d = item->valuedouble;
    if (d < 0 || d > 9007199254740992.0 || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int parse_tensor_entry(qlt_st_tensor *t, const cJSON *entry, const char *path, uint64_t data_size,
                              const unsigned char *data_base, span *sp) {
    const char *name = entry->string;
    if (!cJSON_IsObject(entry)) return qlt_fail("%s: tensor '%s': header entry is not an object", path, name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsString(jd) || !cJSON_IsArray(js) || !cJSON_IsArray(jo))
        return qlt_fail("%s: tensor '%s': header entry needs string 'dtype', array 'shape' and 'data_offsets'",
                        path, name);
    if (qlt_dtype_parse(jd->valuestring, &t->dtype) != 0)
        return qlt_fail("%s: tensor '%s': unsupported dtype '%s' (supported: F32, F16, BF16, F64, I64, I32, I16, "
                        "I8, U8, BOOL)", path, name, jd->valuestring);
    int ndim = cJSON_GetArraySize(js);
    if (ndim > QLT_MAX_DIMS) return qlt_fail("%s: tensor '%s': %d dimensions (at most %d)", path, name, ndim, QLT_MAX_DIMS);
    t->ndim = ndim;
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        uint64_t d;
        if (json_uint(cJSON_GetArrayItem(js, i), &d) != 0)
            return qlt_fail("%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
        if (d && numel > UINT64_MAX / d / 8) return qlt_fail("%s: tensor '%s': shape overflows", path, name);
        t->shape[i] = (int64_t)d;
        numel *= d;
    }
    uint64_t b, e;
    if (cJSON_GetArraySize(jo) != 2 || json_uint(cJSON_GetArrayItem(jo, 0), &b) != 0 ||
        json_uint(cJSON_GetArrayItem(jo, 1), &e) != 0)
        return qlt_fail("%s: tensor '%s': data_offsets must be two non-negative integers", path, name);
    if (b > e || e > data_size)
        return qlt_fail("%s: tensor '%s': data_offsets [%llu, %llu) lie outside the data area of %llu bytes "
                        "(file truncated or corrupt)", path, name, (unsigned long long)b, (unsigned long long)e,
                        (unsigned long long)data_size);
    uint64_t want = numel * qlt_dtype_size(t->dtype);
    if (e - b != want)
        return qlt_fail("%s: tensor '%s': %llu data bytes but dtype %s and shape need %llu", path, name,
                        (unsigned long long)(e - b), jd->valuestring, (unsigned long long)want);
    t->numel = (int64_t)numel;
    t->nbytes = (size_t)(e - b);
    t->data = data_base + b;
    sp->begin = b;
    sp->end = e;
    sp->name = name;
    return 0;
}

static int parse_header(qlt_st_file *f, const char *header, size_t header_len, uint64_t data_size,
                        const unsigned char *data_base) {
    const char *path = f->path;
    cJSON *root = cJSON_ParseWithLength(header, header_len);
    if (!root) return qlt_fail("%s: header is not valid JSON (not a safetensors file, or corrupt)", path);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return qlt_fail("%s: header is not a JSON object", path);
    }
    int count = 0;
    for (cJSON *it = root->child; it; it = it->next)
        if (strcmp(it->string, "__metadata__") != 0) count++;
    f->tensors = qlt_xcalloc((size_t)count, sizeof *f->tensors);
    span *spans = qlt_xcalloc((size_t)count, sizeof *spans);
    int n = 0, rc = 0;
    for (cJSON *it = root->child; it && rc == 0; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(it)) {
                rc = qlt_fail("%s: __metadata__ is not an object", path);
                break;
            }
            if (f->metadata_json) { /* cJSON keeps duplicate keys; the first copy would leak */
                rc = qlt_fail("%s: __metadata__ appears twice in the header", path);
                break;
            }
            f->metadata_json = cJSON_PrintUnformatted(it);
            continue;
        }
        qlt_st_tensor *t = &f->tensors[n];
        t->name = qlt_xstrdup(it->string);
        n++;
        rc = parse_tensor_entry(t, it, path, data_size, data_base, &spans[n - 1]);
    }
    f->n_tensors = n;
    if (rc == 0) {
        qsort(spans, (size_t)n, sizeof *spans, cmp_span);
        int last = -1; /* the non-empty span reaching furthest so far */
        for (int i = 0; i < n && rc == 0; i++) {
            if (spans[i].end == spans[i].begin) continue; /* empty tensors occupy no bytes */
            if (last >= 0 && spans[i].begin < spans[last].end)
                rc = qlt_fail("%s: tensors '%s' and '%s' overlap in the data area", path, spans[last].name,
                              spans[i].name);
            if (last < 0 || spans[i].end > spans[last].end) last = i;
        }
    }
    if (rc == 0) {
        qsort(f->tensors, (size_t)n, sizeof *f->tensors, cmp_tensor_name);
        for (int i = 1; i < n && rc == 0; i++)
            if (strcmp(f->tensors[i].name, f->tensors[i - 1].name) == 0)
                rc = qlt_fail("%s: tensor '%s' appears twice in the header", path, f->tensors[i].name);
    }
    free(spans);
    cJSON_Delete(root);
    return rc;
}

int qlt_st_open(qlt_st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = qlt_xstrdup(path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        qlt_fail("%s: cannot open: %s", path, strerror(errno));
        qlt_st_close(f);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        qlt_fail("%s: not a regular file", path);
        qlt_st_close(f);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        close(fd);
        qlt_fail("%s: file is %zu bytes, too short for a safetensors header (truncated?)", path, size);
        qlt_st_close(f);
        return -1;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        qlt_fail("%s: mmap failed: %s", path, strerror(errno));
        qlt_st_close(f);
        return -1;
    }
    f->map = map;
    f->map_size = size;
    uint64_t header_len = 0;
    const unsigned char *bytes = map;
    for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | bytes[i];
    if (header_len > size - 8) {
        qlt_fail("%s: header length %llu runs past the end of the %zu-byte file (truncated or not safetensors)",
                 path, (unsigned long long)header_len, size);
        qlt_st_close(f);
        return -1;
    }
    if (parse_header(f, (const char *)bytes + 8, (size_t)header_len, size - 8 - header_len,
                     bytes + 8 + header_len) != 0) {
        qlt_st_close(f);
        return -1;
    }
    return 0;
}

void qlt_st_close(qlt_st_file *f) {
    if (f->map) munmap(f->map, f->map_size);
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->metadata_json);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const qlt_st_tensor *qlt_st_find(const qlt_st_file *f, const char *name) {
    int lo = 0, hi = f->n_tensors - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0) return &f->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

void qlt_st_read_f32(const qlt_st_tensor *t, float *dst) {
    QLT_ASSERT(qlt_dtype_is_float(t->dtype));
    qlt_convert_to_f32(dst, t->data, t->dtype, (size_t)t->numel);
}

/* value i's bits: all-ones exponent is NaN (mantissa != 0) or infinity (mantissa 0) */
#define COUNT_NONFINITE(type, exp_mask, man_mask)                      \
    for (int64_t i = 0; i < t->numel; i++) {                           \
        type bits;                                                     \
        memcpy(&bits, (const char *)t->data + i * sizeof bits, sizeof bits); \
        if ((bits & (exp_mask)) != (exp_mask)) continue;               \
        if (bits & (man_mask)) (*nan)++;                               \
        else (*inf)++;                                                 \
        if (*first < 0) *first = i;                                    \
    }

void qlt_st_count_nonfinite(const qlt_st_tensor *t, int64_t *nan, int64_t *inf, int64_t *first) {
    *nan = *inf = 0;
    *first = -1;
    switch (t->dtype) {
    case QLT_DTYPE_F32: COUNT_NONFINITE(uint32_t, 0x7f800000u, 0x007fffffu); break;
    case QLT_DTYPE_F16: COUNT_NONFINITE(uint16_t, 0x7c00u, 0x03ffu); break;
    case QLT_DTYPE_BF16: COUNT_NONFINITE(uint16_t, 0x7f80u, 0x007fu); break;
    case QLT_DTYPE_F64: COUNT_NONFINITE(uint64_t, 0x7ff0000000000000ull, 0x000fffffffffffffull); break;
    default: break;
    }
}
#undef COUNT_NONFINITE

/* ---- model directories ---- */

static int dir_add_file(qlt_st_dir *d, const char *path) {
    d->files = qlt_xrealloc(d->files, (size_t)(d->n_files + 1) * sizeof *d->files);
    if (qlt_st_open(&d->files[d->n_files], path) != 0) return -1;
    d->n_files++;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int dir_open_index(qlt_st_dir *d, const char *dir, const char *index_path) {
    char *text = NULL;
    size_t len = 0;
    QLT_TRY(qlt_read_file(index_path, &text, &len));
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return qlt_fail("%s: not a safetensors index (needs a 'weight_map' object)", index_path);
    }
    int n = 0;
    char **names = NULL;
    for (const cJSON *it = map->child; it; it = it->next) {
        if (!cJSON_IsString(it)) {
            qlt_fail("%s: weight_map['%s'] is not a file name", index_path, it->string); /* before the delete */
            cJSON_Delete(root);
            free(names);
            return -1;
        }
        names = qlt_xrealloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = it->valuestring;
    }
    if (n > 0) qsort(names, (size_t)n, sizeof *names, cmp_str); /* names is NULL for an empty weight_map */
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (i > 0 && strcmp(names[i], names[i - 1]) == 0) continue;
        if (strchr(names[i], '/')) {
            rc = qlt_fail("%s: shard name '%s' must be a file in the same directory", index_path, names[i]);
            break;
        }
        char *p = qlt_path_join(dir, names[i]);
        rc = dir_add_file(d, p);
        free(p);
    }
    free(names);
    cJSON_Delete(root);
    return rc;
}

int qlt_st_dir_open(qlt_st_dir *d, const char *dir) {
    memset(d, 0, sizeof *d);
    char *index = qlt_path_join(dir, "model.safetensors.index.json");
    char *single = qlt_path_join(dir, "model.safetensors");
    int rc;
    if (qlt_file_exists(index)) {
        rc = dir_open_index(d, dir, index);
    } else if (qlt_file_exists(single)) {
        rc = dir_add_file(d, single);
    } else {
        rc = 0;
        DIR *dh = opendir(dir);
        if (!dh) {
            rc = qlt_fail("%s: cannot open model directory: %s", dir, strerror(errno));
        } else {
            char **names = NULL;
            int n = 0;
            struct dirent *e;
            while ((e = readdir(dh))) {
                size_t l = strlen(e->d_name);
                if (l > 12 && strcmp(e->d_name + l - 12, ".safetensors") == 0) {
                    names = qlt_xrealloc(names, (size_t)(n + 1) * sizeof *names);
                    names[n++] = qlt_xstrdup(e->d_name);
                }
            }
            closedir(dh);
            if (n > 0) qsort(names, (size_t)n, sizeof *names, cmp_str); /* names is NULL when n is 0 */
            if (n == 0) rc = qlt_fail("%s: no model.safetensors, index or *.safetensors file found", dir);
            for (int i = 0; i < n; i++) {
                if (rc == 0) {
                    char *p = qlt_path_join(dir, names[i]);
                    rc = dir_add_file(d, p);
                    free(p);
                }
                free(names[i]);
            }
            free(names);
        }
    }
    free(index);
    free(single);
    if (rc != 0) qlt_st_dir_close(d);
    return rc;
}

void qlt_st_dir_close(qlt_st_dir *d) {
    for (int i = 0; i < d->n_files; i++) qlt_st_close(&d->files[i]);
    free(d->files);
    memset(d, 0, sizeof *d);
}

const qlt_st_tensor *qlt_st_dir_find(const qlt_st_dir *d, const char *name) {
    for (int i = 0; i < d->n_files; i++) {
        const qlt_st_tensor *t = qlt_st_find(&d->files[i], name);
        if (t) return t;
    }
    return NULL;
}

/* ---- writer ---- */

void qlt_st_writer_init(qlt_st_writer *w) { memset(w, 0, sizeof *w); }

void qlt_st_writer_add(qlt_st_writer *w, const char *name, qlt_dtype dtype, int ndim, const int64_t *shape,
                       const void *data) {
    QLT_ASSERT(ndim >= 0 && ndim <= QLT_MAX_DIMS);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->items = qlt_xrealloc(w->items, (size_t)w->cap * sizeof *w->items);
    }
    struct qlt_st_wtensor *t = &w->items[w->n++];
    t->name = qlt_xstrdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        numel *= (size_t)shape[i];
    }
    t->nbytes = numel * qlt_dtype_size(dtype);
    t->data = qlt_xmalloc(t->nbytes);
    memcpy(t->data, data, t->nbytes);
}

void qlt_st_writer_set_metadata(qlt_st_writer *w, const char *metadata_json) {
    free(w->metadata_json);
    w->metadata_json = metadata_json ? qlt_xstrdup(metadata_json) : NULL;
}

static int cmp_wtensor(const void *a, const void *b) {
    return strcmp(((const struct qlt_st_wtensor *)a)->name, ((const struct qlt_st_wtensor *)b)->name);
}

int qlt_st_writer_write(qlt_st_writer *w, const char *path) {
    qsort(w->items, (size_t)w->n, sizeof *w->items, cmp_wtensor);
    cJSON *root = cJSON_CreateObject();
    if (w->metadata_json) {
        cJSON *meta = cJSON_Parse(w->metadata_json);
        QLT_ASSERT(meta && cJSON_IsObject(meta));
        cJSON_AddItemToObject(root, "__metadata__", meta);
    }
    uint64_t offset = 0;
    for (int i = 0; i < w->n; i++) {
        struct qlt_st_wtensor *t = &w->items[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "dtype", qlt_dtype_name(t->dtype));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(offset + t->nbytes)));
        offset += t->nbytes;
        cJSON_AddItemToObject(root, t->name, e);
    }
    char *header = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) & ~(size_t)7; /* pad with spaces to 8-byte alignment, as safetensors does */
    qlt_atomic_file af;
    if (qlt_atomic_open(&af, path) != 0) {
        free(header);
        return -1;
    }
    unsigned char len_bytes[8];
    for (int i = 0; i < 8; i++) len_bytes[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int rc = qlt_atomic_write(&af, len_bytes, 8);
    if (rc == 0) rc = qlt_atomic_write(&af, header, hlen);
    for (size_t i = hlen; i < padded && rc == 0; i++) rc = qlt_atomic_write(&af, " ", 1);
    for (int i = 0; i < w->n && rc == 0; i++) rc = qlt_atomic_write(&af, w->items[i].data, w->items[i].nbytes);
    free(header);
    if (rc != 0) {
        qlt_atomic_abort(&af);
        return -1;
    }
    return qlt_atomic_commit(&af);
}

void qlt_st_writer_free(qlt_st_writer *w) {
    for (int i = 0; i < w->n; i++) {
        free(w->items[i].name);
        free(w->items[i].data);
    }
    free(w->items);
    free(w->metadata_json);
    memset(w, 0, sizeof *w);
}

void qlt_st_format_shape(char *buf, size_t size, int ndim, const int64_t *shape) {
    buf[0] = '\0';
    for (int i = 0; i < ndim; i++) snprintf(buf + strlen(buf), size - strlen(buf), "%s%lld", i ? ", " : "", (long long)shape[i]);
}
