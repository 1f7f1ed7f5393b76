/* gguf_write.c: the GGUF v3 writer and the Q8_0 codec (see gguf_write.h). Layout, little-endian:
 *   "GGUF" u32 version u64 n_tensors u64 n_kv
 *   n_kv x { string key, u32 value type, value }        string = u64 length + bytes (no NUL)
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset }
 *   padding to 32, then the data section: each tensor at its offset (a multiple of 32), zero padding between. */
#include "formats/gguf_write.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"

enum { /* gguf_type: metadata value types */
    KV_UINT8 = 0,
    KV_INT8 = 1,
    KV_UINT16 = 2,
    KV_INT16 = 3,
    KV_UINT32 = 4,
    KV_INT32 = 5,
    KV_FLOAT32 = 6,
    KV_BOOL = 7,
    KV_STRING = 8,
    KV_ARRAY = 9,
    KV_UINT64 = 10,
    KV_INT64 = 11,
    KV_FLOAT64 = 12,
};

const char *qlt_gguf_type_name(qlt_gguf_type t) {
    switch (t) {
    case QLT_GGUF_F32: return "F32";
    case QLT_GGUF_F16: return "F16";
    case QLT_GGUF_BF16: return "BF16";
    case QLT_GGUF_Q8_0: return "Q8_0";
    }
    return "?";
}

int64_t qlt_gguf_nbytes(qlt_gguf_type t, int64_t n) {
    switch (t) {
    case QLT_GGUF_F32: return 4 * n;
    case QLT_GGUF_F16:
    case QLT_GGUF_BF16: return 2 * n;
    case QLT_GGUF_Q8_0: return n / QLT_GGUF_Q8_0_BLOCK * QLT_GGUF_Q8_0_BYTES;
    }
    QLT_ASSERT(!"qlt_gguf_nbytes: unknown type");
    return 0;
}

void qlt_gguf_quantize_q8_0(const float *x, void *out, int64_t n) {
    QLT_ASSERT(n % QLT_GGUF_Q8_0_BLOCK == 0);
    unsigned char *o = out;
    for (int64_t b = 0; b < n / QLT_GGUF_Q8_0_BLOCK; b++) {
        const float *xb = x + b * QLT_GGUF_Q8_0_BLOCK;
        unsigned char *ob = o + b * QLT_GGUF_Q8_0_BYTES;
        float amax = 0.0f;
        for (int j = 0; j < QLT_GGUF_Q8_0_BLOCK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = qlt_f32_to_f16(d);
        ob[0] = (unsigned char)(dh & 0xff);
        ob[1] = (unsigned char)(dh >> 8);
        for (int j = 0; j < QLT_GGUF_Q8_0_BLOCK; j++) ob[2 + j] = (unsigned char)(int8_t)roundf(xb[j] * id);
    }
}

void qlt_gguf_dequantize_q8_0(const void *in, float *out, int64_t n) {
    const unsigned char *p = in;
    for (int64_t b = 0; b < n / QLT_GGUF_Q8_0_BLOCK; b++) {
        const unsigned char *pb = p + b * QLT_GGUF_Q8_0_BYTES;
        float d = qlt_f16_to_f32((uint16_t)(pb[0] | pb[1] << 8));
        for (int j = 0; j < QLT_GGUF_Q8_0_BLOCK; j++) out[b * QLT_GGUF_Q8_0_BLOCK + j] = (float)(int8_t)pb[2 + j] * d;
    }
}

/* ---- metadata ---- */

static void kv_put(qlt_gguf_writer *w, const void *bytes, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        w->kv_cap = (w->kv_len + n) * 2 + 256;
        w->kv = qlt_xrealloc(w->kv, w->kv_cap);
    }
    memcpy(w->kv + w->kv_len, bytes, n);
    w->kv_len += n;
}

static void put_le(qlt_gguf_writer *w, uint64_t v, int bytes) {
    unsigned char b[8];
    for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
    kv_put(w, b, (size_t)bytes);
}

static void put_string(qlt_gguf_writer *w, const char *s) {
    size_t n = strlen(s);
    put_le(w, n, 8);
    kv_put(w, s, n);
}

static void put_key(qlt_gguf_writer *w, const char *key, uint32_t type) {
    put_string(w, key);
    put_le(w, type, 4);
    w->n_kv++;
}

void qlt_gguf_writer_init(qlt_gguf_writer *w) { memset(w, 0, sizeof *w); }

void qlt_gguf_add_u32(qlt_gguf_writer *w, const char *key, uint32_t v) {
    put_key(w, key, KV_UINT32);
    put_le(w, v, 4);
}

void qlt_gguf_add_i32(qlt_gguf_writer *w, const char *key, int32_t v) {
    put_key(w, key, KV_INT32);
    put_le(w, (uint32_t)v, 4);
}

void qlt_gguf_add_f32(qlt_gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_key(w, key, KV_FLOAT32);
    put_le(w, bits, 4);
}

void qlt_gguf_add_bool(qlt_gguf_writer *w, const char *key, int v) {
    put_key(w, key, KV_BOOL);
    put_le(w, v ? 1 : 0, 1);
}

void qlt_gguf_add_string(qlt_gguf_writer *w, const char *key, const char *v) {
    put_key(w, key, KV_STRING);
    put_string(w, v);
}

void qlt_gguf_add_string_array(qlt_gguf_writer *w, const char *key, const char *const *v, int64_t n) {
    put_key(w, key, KV_ARRAY);
    put_le(w, KV_STRING, 4);
    put_le(w, (uint64_t)n, 8);
    for (int64_t i = 0; i < n; i++) put_string(w, v[i]);
}

void qlt_gguf_add_i32_array(qlt_gguf_writer *w, const char *key, const int32_t *v, int64_t n) {
    put_key(w, key, KV_ARRAY);
    put_le(w, KV_INT32, 4);
    put_le(w, (uint64_t)n, 8);
    for (int64_t i = 0; i < n; i++) put_le(w, (uint32_t)v[i], 4);
}

/* ---- tensors ---- */

static int64_t align_up(int64_t x) { return (x + QLT_GGUF_ALIGNMENT - 1) / QLT_GGUF_ALIGNMENT * QLT_GGUF_ALIGNMENT; }

int qlt_gguf_add_tensor(qlt_gguf_writer *w, const char *name, int ndim, const int64_t *ne, qlt_gguf_type type) {
    QLT_ASSERT(ndim >= 1 && ndim <= QLT_GGUF_MAX_DIMS && !w->file.fp);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (ne[d] < 0) return qlt_fail("GGUF tensor '%s': dimension %d is negative", name, d);
        n *= ne[d];
    }
    if (type == QLT_GGUF_Q8_0 && ne[0] % QLT_GGUF_Q8_0_BLOCK != 0)
        return qlt_fail("GGUF tensor '%s': Q8_0 needs rows of a multiple of %d values, its rows hold %lld", name,
                        QLT_GGUF_Q8_0_BLOCK, (long long)ne[0]);
    if (w->n_tensors == w->cap_tensors) {
        w->cap_tensors = w->cap_tensors ? 2 * w->cap_tensors : 64;
        w->tensors = qlt_xrealloc(w->tensors, (size_t)w->cap_tensors * sizeof *w->tensors);
    }
    qlt_gguf_tensor_info *t = &w->tensors[w->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = qlt_xstrdup(name);
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->ne[d] = ne[d];
    t->type = type;
    t->offset = w->data_bytes;
    t->nbytes = qlt_gguf_nbytes(type, n);
    w->data_bytes = align_up(t->offset + t->nbytes);
    return 0;
}

static const unsigned char zeros[QLT_GGUF_ALIGNMENT];

int qlt_gguf_begin(qlt_gguf_writer *w, const char *path) {
    /* the tensor infos go after the metadata in the same buffer, so the header is one write */
    size_t kv_len = w->kv_len;
    for (int i = 0; i < w->n_tensors; i++) {
        const qlt_gguf_tensor_info *t = &w->tensors[i];
        put_string(w, t->name);
        put_le(w, (uint32_t)t->ndim, 4);
        for (int d = 0; d < t->ndim; d++) put_le(w, (uint64_t)t->ne[d], 8);
        put_le(w, (uint32_t)t->type, 4);
        put_le(w, (uint64_t)t->offset, 8);
    }
    unsigned char head[24] = {'G', 'G', 'U', 'F'};
    uint64_t fields[3] = {QLT_GGUF_VERSION, (uint64_t)w->n_tensors, (uint64_t)w->n_kv};
    for (int i = 0; i < 4; i++) head[4 + i] = (unsigned char)(fields[0] >> (8 * i));
    for (int i = 0; i < 8; i++) head[8 + i] = (unsigned char)(fields[1] >> (8 * i));
    for (int i = 0; i < 8; i++) head[16 + i] = (unsigned char)(fields[2] >> (8 * i));
    int64_t header = 24 + (int64_t)w->kv_len;
    int rc = qlt_atomic_open(&w->file, path);
    if (rc == 0) rc = qlt_atomic_write(&w->file, head, sizeof head);
    if (rc == 0) rc = qlt_atomic_write(&w->file, w->kv, w->kv_len);
    if (rc == 0) rc = qlt_atomic_write(&w->file, zeros, (size_t)(align_up(header) - header));
    w->kv_len = kv_len; /* the metadata alone again */
    w->next = 0;
    w->written = 0;
    return rc;
}

int qlt_gguf_write_data(qlt_gguf_writer *w, const void *data, int64_t nbytes) {
    QLT_ASSERT(w->file.fp && w->next < w->n_tensors);
    const qlt_gguf_tensor_info *t = &w->tensors[w->next];
    QLT_ASSERT(nbytes == t->nbytes && w->written == t->offset);
    QLT_TRY(qlt_atomic_write(&w->file, data, (size_t)nbytes));
    int64_t end = align_up(t->offset + nbytes);
    QLT_TRY(qlt_atomic_write(&w->file, zeros, (size_t)(end - t->offset - nbytes)));
    w->written = end;
    w->next++;
    return 0;
}

int qlt_gguf_finish(qlt_gguf_writer *w) {
    QLT_ASSERT(w->file.fp && w->next == w->n_tensors);
    return qlt_atomic_commit(&w->file);
}

void qlt_gguf_writer_free(qlt_gguf_writer *w) {
    if (w->file.fp) qlt_atomic_abort(&w->file);
    for (int i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv);
    memset(w, 0, sizeof *w);
}
