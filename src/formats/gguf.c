/* gguf.c: the validated GGUF reader (see gguf.h). The file is mmapped; the parser walks it with a cursor
 * whose every read is checked against the bytes left, so nothing is read, allocated or indexed from a
 * length before that length is known to lie inside the file. Multi-byte values are little-endian, as
 * GGUF stores them and as the hosts qlora-train runs on are. */
#include "formats/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

#define GGUF_MAGIC "GGUF"
#define HEADER_BYTES 24          /* magic, version, tensor count, kv count */
#define MIN_KV_BYTES 13          /* key length u64 + type u32 + a one-byte value */
#define MIN_TENSOR_INFO_BYTES 32 /* name length u64 + n_dims u32 + one dim u64 + type u32 + offset u64 */
#define MAX_NAME_BYTES 4096      /* keys and tensor names: short ASCII paths in practice (ggml's limit is 64) */
#define MAX_ARRAY_DEPTH 8        /* arrays of arrays: nesting beyond this is refused */

/* ggml's types: name, elements per block, bytes per block (ggml.c's type traits). Holes are ids ggml
 * retired; they read as unknown. */
static const struct {
    const char *name;
    int64_t block, bytes;
} ggml_types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},          [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},       [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},       [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},    [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},    [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98},  [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},   [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},          [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},         [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},        [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},     [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

static const char *const vtype_names[QLT_GGUF_VAL_COUNT] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                              "bool", "string", "array", "u64", "i64", "f64"};
/* Bytes of a scalar value; 0 for string and array (variable). */
static const uint8_t vtype_bytes[QLT_GGUF_VAL_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *qlt_ggml_type_name(uint32_t type) {
    return type < N_GGML_TYPES && ggml_types[type].name ? ggml_types[type].name : "unknown";
}
int64_t qlt_ggml_type_block(uint32_t type) { return type < N_GGML_TYPES ? ggml_types[type].block : 0; }
int64_t qlt_ggml_type_block_bytes(uint32_t type) { return type < N_GGML_TYPES ? ggml_types[type].bytes : 0; }
const char *qlt_gguf_vtype_name(qlt_gguf_vtype t) { return (unsigned)t < QLT_GGUF_VAL_COUNT ? vtype_names[t] : "?"; }

/* ---- the cursor: every read checked against the bytes left ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size, pos;
    const char *path;
} cursor;

static uint64_t left(const cursor *c) { return c->size - c->pos; }

/* "PATH: WHAT (at byte N) runs past the end of the S-byte file: the file is truncated or not GGUF". */
static int past_end(const cursor *c, const char *what) {
    return qlt_fail("%s: %s (at byte %llu) runs past the end of the %llu-byte file: the file is truncated or "
                    "damaged; download or convert it again", c->path, what, (unsigned long long)c->pos,
                    (unsigned long long)c->size);
}

static int read_u32(cursor *c, uint32_t *v, const char *what) {
    if (left(c) < 4) return past_end(c, what);
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int read_u64(cursor *c, uint64_t *v, const char *what) {
    if (left(c) < 8) return past_end(c, what);
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* A string: length u64 then the bytes; *s points into the map. */
static int read_string(cursor *c, const char **s, uint64_t *len, const char *what) {
    QLT_TRY(read_u64(c, len, what));
    if (*len > left(c)) {
        return qlt_fail("%s: %s claims %llu bytes at byte %llu, more than the %llu left in the file: the file is "
                        "truncated or damaged", c->path, what, (unsigned long long)*len, (unsigned long long)c->pos,
                        (unsigned long long)left(c));
    }
    *s = (const char *)c->base + c->pos;
    c->pos += *len;
    return 0;
}

/* A key or tensor name: 1..MAX_NAME_BYTES bytes without NUL, copied to a C string. */
static int read_name(cursor *c, char **out, const char *what) {
    const char *s;
    uint64_t len;
    QLT_TRY(read_string(c, &s, &len, what));
    if (len == 0 || len > MAX_NAME_BYTES || memchr(s, '\0', (size_t)len))
        return qlt_fail("%s: %s at byte %llu is %s (a name has 1 to %d bytes and no NUL)", c->path, what,
                        (unsigned long long)(c->pos - len), len == 0 ? "empty" : len > MAX_NAME_BYTES ? "too long" :
                        "holding a NUL byte", MAX_NAME_BYTES);
    *out = qlt_xmalloc((size_t)len + 1);
    memcpy(*out, s, (size_t)len);
    (*out)[len] = '\0';
    return 0;
}

/* Bytes the smallest element of type t can take (for bounding an array's count by the bytes left). */
static uint64_t min_value_bytes(qlt_gguf_vtype t) {
    if (t == QLT_GGUF_VAL_STRING) return 8;
    if (t == QLT_GGUF_VAL_ARRAY) return 12;
    return vtype_bytes[t];
}

static int read_vtype(cursor *c, qlt_gguf_vtype *t, const char *key) {
    char what[MAX_NAME_BYTES + 64];
    snprintf(what, sizeof what, "key '%s': value type", key);
    uint32_t v = 0;
    QLT_TRY(read_u32(c, &v, what));
    if (v >= QLT_GGUF_VAL_COUNT)
        return qlt_fail("%s: key '%s': unknown value type %u (GGUF defines 0 to %d): the file is damaged or from a "
                        "newer GGUF version", c->path, key, v, QLT_GGUF_VAL_COUNT - 1);
    *t = (qlt_gguf_vtype)v;
    return 0;
}

static int skip_value(cursor *c, qlt_gguf_vtype t, int depth, const char *key);

/* An array's element type and count (the header), bounded by the bytes left. */
static int read_array_header(cursor *c, int depth, const char *key, qlt_gguf_vtype *elem, uint64_t *count) {
    if (depth >= MAX_ARRAY_DEPTH)
        return qlt_fail("%s: key '%s': arrays nested more than %d deep", c->path, key, MAX_ARRAY_DEPTH);
    QLT_TRY(read_vtype(c, elem, key));
    char what[MAX_NAME_BYTES + 64];
    snprintf(what, sizeof what, "key '%s': array length", key);
    QLT_TRY(read_u64(c, count, what));
    if (*count > left(c) / min_value_bytes(*elem))
        return qlt_fail("%s: key '%s': an array of %llu %s values cannot fit in the %llu bytes left in the file: the "
                        "file is truncated or damaged", c->path, key, (unsigned long long)*count,
                        vtype_names[*elem], (unsigned long long)left(c));
    return 0;
}

static int skip_value(cursor *c, qlt_gguf_vtype t, int depth, const char *key) {
    char what[MAX_NAME_BYTES + 64];
    if (t == QLT_GGUF_VAL_STRING) {
        const char *s;
        uint64_t len;
        snprintf(what, sizeof what, "key '%s': string value", key);
        return read_string(c, &s, &len, what);
    }
    if (t == QLT_GGUF_VAL_ARRAY) {
        qlt_gguf_vtype elem;
        uint64_t count;
        QLT_TRY(read_array_header(c, depth, key, &elem, &count));
        if (vtype_bytes[elem]) { /* count * size <= bytes left: checked by the header */
            c->pos += count * vtype_bytes[elem];
            return 0;
        }
        for (uint64_t i = 0; i < count; i++) QLT_TRY(skip_value(c, elem, depth + 1, key));
        return 0;
    }
    if (left(c) < vtype_bytes[t]) {
        snprintf(what, sizeof what, "key '%s': %s value", key, vtype_names[t]);
        return past_end(c, what);
    }
    c->pos += vtype_bytes[t];
    return 0;
}

/* ---- open ---- */

static int cmp_kv_key(const void *a, const void *b) {
    return strcmp((*(const qlt_gguf_kv *const *)a)->key, (*(const qlt_gguf_kv *const *)b)->key);
}

/* Sort keys for the tensor checks: a tensor's index with its name or data offset. */
typedef struct tensor_key {
    const char *name;
    uint64_t offset;
    int64_t index;
} tensor_key;

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const tensor_key *)a)->name, ((const tensor_key *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b) {
    uint64_t x = ((const tensor_key *)a)->offset, y = ((const tensor_key *)b)->offset;
    return x < y ? -1 : x > y;
}

static int parse_kvs(qlt_gguf *g, cursor *c, uint64_t n_kv) {
    int64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (g->n_kv == cap) {
            cap = cap ? 2 * cap : 64;
            g->kv = qlt_xrealloc(g->kv, sizeof *g->kv * (size_t)cap);
        }
        qlt_gguf_kv *kv = &g->kv[g->n_kv];
        memset(kv, 0, sizeof *kv);
        char what[64];
        snprintf(what, sizeof what, "the name of key/value #%llu", (unsigned long long)i);
        QLT_TRY(read_name(c, &kv->key, what));
        g->n_kv++;
        QLT_TRY(read_vtype(c, &kv->type, kv->key));
        kv->count = 1;
        if (kv->type == QLT_GGUF_VAL_ARRAY) {
            QLT_TRY(read_array_header(c, 0, kv->key, &kv->elem_type, &kv->count));
            kv->data = c->base + c->pos;
            if (vtype_bytes[kv->elem_type]) c->pos += kv->count * vtype_bytes[kv->elem_type];
            else
                for (uint64_t k = 0; k < kv->count; k++) QLT_TRY(skip_value(c, kv->elem_type, 1, kv->key));
        } else {
            kv->data = c->base + c->pos;
            QLT_TRY(skip_value(c, kv->type, 0, kv->key));
        }
    }
    if (g->n_kv > 1) {
        const qlt_gguf_kv **sorted = qlt_xmalloc(sizeof *sorted * (size_t)g->n_kv);
        for (int64_t i = 0; i < g->n_kv; i++) sorted[i] = &g->kv[i];
        qsort(sorted, (size_t)g->n_kv, sizeof *sorted, cmp_kv_key);
        int rc = 0;
        for (int64_t i = 1; i < g->n_kv && rc == 0; i++)
            if (strcmp(sorted[i]->key, sorted[i - 1]->key) == 0)
                rc = qlt_fail("%s: key '%s' appears twice: the file is damaged", g->path, sorted[i]->key);
        free(sorted);
        QLT_TRY(rc);
    }
    return 0;
}

static int parse_tensor_info(qlt_gguf *g, cursor *c, qlt_gguf_tensor *t, uint64_t index) {
    char what[MAX_NAME_BYTES + 64];
    snprintf(what, sizeof what, "the name of tensor #%llu", (unsigned long long)index);
    QLT_TRY(read_name(c, &t->name, what));
    uint32_t ndim = 0;
    snprintf(what, sizeof what, "tensor '%s': number of dims", t->name);
    QLT_TRY(read_u32(c, &ndim, what));
    if (ndim < 1 || ndim > QLT_GGUF_MAX_DIMS)
        return qlt_fail("%s: tensor '%s' has %u dims; GGUF tensors have 1 to %d", g->path, t->name, ndim,
                        QLT_GGUF_MAX_DIMS);
    t->ndim = (int)ndim;
    t->numel = 1;
    for (int d = 0; d < QLT_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t ne = 0;
        snprintf(what, sizeof what, "tensor '%s': dim %d", t->name, d);
        QLT_TRY(read_u64(c, &ne, what));
        if (ne > (uint64_t)INT64_MAX)
            return qlt_fail("%s: tensor '%s': dim %d is %llu, beyond 2^63", g->path, t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        if (t->ne[d] != 0 && t->numel > INT64_MAX / t->ne[d])
            return qlt_fail("%s: tensor '%s': the product of its dims overflows 64 bits: the file is damaged", g->path,
                            t->name);
        t->numel *= t->ne[d];
    }
    snprintf(what, sizeof what, "tensor '%s': type", t->name);
    QLT_TRY(read_u32(c, &t->type, what));
    snprintf(what, sizeof what, "tensor '%s': data offset", t->name);
    QLT_TRY(read_u64(c, &t->offset, what));
    int64_t block = qlt_ggml_type_block(t->type), bytes = qlt_ggml_type_block_bytes(t->type);
    if (block == 0)
        return qlt_fail("%s: tensor '%s' has unknown ggml type %u: the file is damaged or needs a newer reader",
                        g->path, t->name, t->type);
    if (t->ne[0] % block != 0)
        return qlt_fail("%s: tensor '%s': its rows hold %lld values, not a multiple of the %s block of %lld", g->path,
                        t->name, (long long)t->ne[0], qlt_ggml_type_name(t->type), (long long)block);
    int64_t blocks = t->numel / block;
    if (blocks > INT64_MAX / bytes)
        return qlt_fail("%s: tensor '%s': its size in bytes overflows 64 bits: the file is damaged", g->path, t->name);
    t->nbytes = (uint64_t)(blocks * bytes);
    return 0;
}

static int place_tensors(qlt_gguf *g) {
    uint64_t data_bytes = g->map_size - g->data_offset;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        qlt_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return qlt_fail("%s: tensor '%s': data offset %llu is not a multiple of the alignment %llu: the file is "
                            "damaged", g->path, t->name, (unsigned long long)t->offset,
                            (unsigned long long)g->alignment);
        if (t->offset > data_bytes || t->nbytes > data_bytes - t->offset)
            return qlt_fail("%s: tensor '%s': its %llu bytes at data offset %llu run past the end of the %llu-byte "
                            "data section: the file is truncated", g->path, t->name, (unsigned long long)t->nbytes,
                            (unsigned long long)t->offset, (unsigned long long)data_bytes);
        t->data = (const uint8_t *)g->map + g->data_offset + t->offset;
    }
    size_t n = (size_t)g->n_tensors;
    tensor_key *keys = qlt_xmalloc(sizeof *keys * (n ? n : 1));
    for (size_t i = 0; i < n; i++) keys[i] = (tensor_key){g->tensors[i].name, g->tensors[i].offset, (int64_t)i};
    qsort(keys, n, sizeof *keys, cmp_tensor_offset);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++) {
        const qlt_gguf_tensor *a = &g->tensors[keys[i - 1].index], *b = &g->tensors[keys[i].index];
        if (b->offset < a->offset + a->nbytes)
            rc = qlt_fail("%s: tensors '%s' and '%s' overlap in the data section: the file is damaged", g->path,
                          a->name, b->name);
    }
    qsort(keys, n, sizeof *keys, cmp_tensor_name);
    g->by_name = qlt_xmalloc(sizeof *g->by_name * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        g->by_name[i] = keys[i].index;
        if (i > 0 && rc == 0 && strcmp(keys[i].name, keys[i - 1].name) == 0)
            rc = qlt_fail("%s: tensor '%s' appears twice: the file is damaged", g->path, keys[i].name);
    }
    free(keys);
    return rc;
}

static int read_alignment(qlt_gguf *g) {
    g->alignment = QLT_GGUF_DEFAULT_ALIGNMENT;
    const qlt_gguf_kv *kv = qlt_gguf_find_kv(g, "general.alignment");
    if (!kv) return 0;
    int64_t a;
    if (kv->type == QLT_GGUF_VAL_ARRAY || kv->type == QLT_GGUF_VAL_STRING || kv->type == QLT_GGUF_VAL_F32 ||
        kv->type == QLT_GGUF_VAL_F64 || kv->type == QLT_GGUF_VAL_BOOL || qlt_gguf_get_int(g, "general.alignment", 0, &a) < 0)
        return qlt_fail("%s: key 'general.alignment' is a %s; it must be an unsigned integer (a power of two)", g->path,
                        vtype_names[kv->type]);
    if (a <= 0 || (a & (a - 1)) != 0)
        return qlt_fail("%s: key 'general.alignment' is %lld; it must be a power of two", g->path, (long long)a);
    g->alignment = (uint64_t)a;
    return 0;
}

static int parse(qlt_gguf *g) {
    cursor c = {g->map, g->map_size, 0, g->path};
    const uint8_t *b = g->map;
    if (g->map_size < 4 || memcmp(b, GGUF_MAGIC, 4) != 0)
        return qlt_fail("%s: not a GGUF file (it does not start with \"GGUF\"); a llama.cpp .gguf file was expected",
                        g->path);
    if (g->map_size < HEADER_BYTES)
        return qlt_fail("%s: %zu bytes, shorter than a GGUF header (%d bytes): the file is truncated", g->path,
                        g->map_size, HEADER_BYTES);
    c.pos = 4;
    QLT_TRY(read_u32(&c, &g->version, "the version"));
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return qlt_fail("%s: a big-endian GGUF file; qlora-train reads little-endian GGUF (convert it again without "
                        "--bigendian)", g->path);
    if (g->version != 2 && g->version != 3)
        return qlt_fail("%s: GGUF version %u; qlora-train reads versions 2 and 3 (convert the model again with a "
                        "current llama.cpp)", g->path, g->version);
    uint64_t n_tensors, n_kv;
    QLT_TRY(read_u64(&c, &n_tensors, "the tensor count"));
    QLT_TRY(read_u64(&c, &n_kv, "the key/value count"));
    if (n_kv > left(&c) / MIN_KV_BYTES)
        return qlt_fail("%s: the header claims %llu key/values, more than the %llu-byte file can hold: the file is "
                        "damaged", g->path, (unsigned long long)n_kv, (unsigned long long)g->map_size);
    if (n_tensors > left(&c) / MIN_TENSOR_INFO_BYTES)
        return qlt_fail("%s: the header claims %llu tensors, more than the %llu-byte file can hold: the file is "
                        "damaged", g->path, (unsigned long long)n_tensors, (unsigned long long)g->map_size);
    QLT_TRY(parse_kvs(g, &c, n_kv));
    QLT_TRY(read_alignment(g));
    if (n_tensors > left(&c) / MIN_TENSOR_INFO_BYTES)
        return qlt_fail("%s: the header claims %llu tensors, more than the %llu bytes after the key/values can hold: "
                        "the file is damaged", g->path, (unsigned long long)n_tensors, (unsigned long long)left(&c));
    int64_t cap = 0; /* grown as infos parse, so memory follows the bytes read, not the count claimed */
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (g->n_tensors == cap) {
            cap = cap ? 2 * cap : 64;
            g->tensors = qlt_xrealloc(g->tensors, sizeof *g->tensors * (size_t)cap);
        }
        qlt_gguf_tensor *t = &g->tensors[g->n_tensors++];
        memset(t, 0, sizeof *t);
        QLT_TRY(parse_tensor_info(g, &c, t, i));
    }
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    if (pad > left(&c)) {
        if (n_tensors > 0)
            return qlt_fail("%s: the data section (aligned to %llu bytes after byte %llu) starts past the end of the "
                            "%llu-byte file: the file is truncated", g->path, (unsigned long long)g->alignment,
                            (unsigned long long)c.pos, (unsigned long long)g->map_size);
        pad = left(&c);
    }
    g->data_offset = c.pos + pad;
    return place_tensors(g);
}

int qlt_gguf_open(qlt_gguf *g, const char *path) {
    memset(g, 0, sizeof *g);
    g->path = qlt_xstrdup(path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        qlt_fail("%s: cannot open: %s", path, strerror(errno));
        qlt_gguf_close(g);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        qlt_fail("%s: not a regular file (a .gguf file was expected)", path);
        qlt_gguf_close(g);
        return -1;
    }
    g->map_size = (size_t)st.st_size;
    if (g->map_size == 0) {
        close(fd);
        qlt_fail("%s: the file is empty, not GGUF", path);
        qlt_gguf_close(g);
        return -1;
    }
    void *map = mmap(NULL, g->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        qlt_fail("%s: mmap failed: %s", path, strerror(errno));
        qlt_gguf_close(g);
        return -1;
    }
    g->map = map;
    if (parse(g) != 0) {
        qlt_gguf_close(g);
        return -1;
    }
    return 0;
}

void qlt_gguf_close(qlt_gguf *g) {
    if (g->map) munmap(g->map, g->map_size);
    for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].key);
    for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->by_name);
    free(g->path);
    memset(g, 0, sizeof *g);
}

int qlt_gguf_is_gguf(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    char magic[4];
    ssize_t n = read(fd, magic, 4);
    close(fd);
    return n == 4 && memcmp(magic, GGUF_MAGIC, 4) == 0;
}

/* ---- lookups and typed reads ---- */

const qlt_gguf_kv *qlt_gguf_find_kv(const qlt_gguf *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

const qlt_gguf_tensor *qlt_gguf_find_tensor(const qlt_gguf *g, const char *name) {
    int64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->tensors[g->by_name[mid]].name, name);
        if (c == 0) return &g->tensors[g->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* A scalar of an integer or bool type at p as int64; *ok 0 when a u64 does not fit. */
static int64_t scalar_int(qlt_gguf_vtype t, const uint8_t *p, int *ok) {
    *ok = 1;
    switch (t) {
    case QLT_GGUF_VAL_U8: case QLT_GGUF_VAL_BOOL: return p[0];
    case QLT_GGUF_VAL_I8: return (int8_t)p[0];
    case QLT_GGUF_VAL_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case QLT_GGUF_VAL_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case QLT_GGUF_VAL_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case QLT_GGUF_VAL_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case QLT_GGUF_VAL_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case QLT_GGUF_VAL_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) *ok = 0;
        return (int64_t)(v & (uint64_t)INT64_MAX);
    }
    default: *ok = 0; return 0;
    }
}

static int is_integer(qlt_gguf_vtype t) {
    return t == QLT_GGUF_VAL_U8 || t == QLT_GGUF_VAL_I8 || t == QLT_GGUF_VAL_U16 || t == QLT_GGUF_VAL_I16 || t == QLT_GGUF_VAL_U32 ||
           t == QLT_GGUF_VAL_I32 || t == QLT_GGUF_VAL_U64 || t == QLT_GGUF_VAL_I64;
}

static int wrong_type(const qlt_gguf *g, const qlt_gguf_kv *kv, const char *want) {
    return qlt_fail("%s: key '%s' is a %s%s%s; expected %s", g->path, kv->key, vtype_names[kv->type],
                    kv->type == QLT_GGUF_VAL_ARRAY ? " of " : "", kv->type == QLT_GGUF_VAL_ARRAY ? vtype_names[kv->elem_type] : "",
                    want);
}

int qlt_gguf_get_int(const qlt_gguf *g, const char *key, int64_t def, int64_t *out) {
    const qlt_gguf_kv *kv = qlt_gguf_find_kv(g, key);
    *out = def;
    if (!kv) return 0;
    if (!is_integer(kv->type)) return wrong_type(g, kv, "an integer");
    int ok;
    int64_t v = scalar_int(kv->type, kv->data, &ok);
    if (!ok) return qlt_fail("%s: key '%s' does not fit a signed 64-bit integer", g->path, key);
    *out = v;
    return 1;
}

int qlt_gguf_get_float(const qlt_gguf *g, const char *key, double def, double *out) {
    const qlt_gguf_kv *kv = qlt_gguf_find_kv(g, key);
    *out = def;
    if (!kv) return 0;
    if (kv->type == QLT_GGUF_VAL_F32) {
        float v;
        memcpy(&v, kv->data, 4);
        *out = v;
    } else if (kv->type == QLT_GGUF_VAL_F64) {
        memcpy(out, kv->data, 8);
    } else if (is_integer(kv->type)) {
        int ok;
        *out = (double)scalar_int(kv->type, kv->data, &ok);
    } else {
        return wrong_type(g, kv, "a number");
    }
    return 1;
}

int qlt_gguf_get_bool(const qlt_gguf *g, const char *key, int def, int *out) {
    const qlt_gguf_kv *kv = qlt_gguf_find_kv(g, key);
    *out = def;
    if (!kv) return 0;
    if (kv->type != QLT_GGUF_VAL_BOOL) return wrong_type(g, kv, "a bool");
    *out = kv->data[0] != 0;
    return 1;
}

int qlt_gguf_get_string(const qlt_gguf *g, const char *key, const char **s, uint64_t *len) {
    const qlt_gguf_kv *kv = qlt_gguf_find_kv(g, key);
    *s = NULL;
    *len = 0;
    if (!kv) return 0;
    if (kv->type != QLT_GGUF_VAL_STRING) return wrong_type(g, kv, "a string");
    memcpy(len, kv->data, 8);
    *s = (const char *)kv->data + 8;
    return 1;
}

int qlt_gguf_get_array(const qlt_gguf *g, const char *key, qlt_gguf_vtype elem, const qlt_gguf_kv **out) {
    const qlt_gguf_kv *kv = qlt_gguf_find_kv(g, key);
    *out = NULL;
    if (!kv) return 0;
    if (kv->type != QLT_GGUF_VAL_ARRAY || (elem != QLT_GGUF_VAL_COUNT && kv->elem_type != elem)) {
        char want[32];
        snprintf(want, sizeof want, "an array of %s", elem == QLT_GGUF_VAL_COUNT ? "values" : vtype_names[elem]);
        return wrong_type(g, kv, want);
    }
    *out = kv;
    return 1;
}

void qlt_gguf_next_string(const uint8_t **p, const char **s, uint64_t *len) {
    memcpy(len, *p, 8);
    *s = (const char *)*p + 8;
    *p += 8 + *len;
}

int64_t qlt_gguf_array_int(const qlt_gguf_kv *kv, uint64_t i) {
    QLT_ASSERT(kv->type == QLT_GGUF_VAL_ARRAY && i < kv->count && vtype_bytes[kv->elem_type] > 0);
    const uint8_t *p = kv->data + i * vtype_bytes[kv->elem_type];
    if (kv->elem_type == QLT_GGUF_VAL_F32) {
        float v;
        memcpy(&v, p, 4);
        return (int64_t)v;
    }
    if (kv->elem_type == QLT_GGUF_VAL_F64) {
        double v;
        memcpy(&v, p, 8);
        return (int64_t)v;
    }
    int ok;
    return scalar_int(kv->elem_type, p, &ok);
}

double qlt_gguf_array_float(const qlt_gguf_kv *kv, uint64_t i) {
    QLT_ASSERT(kv->type == QLT_GGUF_VAL_ARRAY && i < kv->count && vtype_bytes[kv->elem_type] > 0);
    const uint8_t *p = kv->data + i * vtype_bytes[kv->elem_type];
    if (kv->elem_type == QLT_GGUF_VAL_F32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    if (kv->elem_type == QLT_GGUF_VAL_F64) {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    int ok;
    return (double)scalar_int(kv->elem_type, p, &ok);
}

void qlt_gguf_format_shape(char *buf, size_t size, const qlt_gguf_tensor *t) {
    size_t n = 0;
    buf[0] = '\0';
    for (int d = t->ndim - 1; d >= 0 && n < size; d--) {
        int w = snprintf(buf + n, size - n, d == t->ndim - 1 ? "%lld" : ", %lld", (long long)t->ne[d]);
        if (w < 0) break;
        n += (size_t)w;
    }
}
