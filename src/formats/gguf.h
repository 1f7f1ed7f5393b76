/* gguf.h: reading llama.cpp's GGUF files (versions 2 and 3, little-endian), mmapped and validated.
 *
 * A GGUF file is: "GGUF", version u32, tensor count u64, key/value count u64; the key/values (key string,
 * value type u32, value; an array is element type u32, count u64, elements; a string is length u64 +
 * bytes); the tensor infos (name string, n_dims u32, n_dims dims u64 with dims[0] the innermost, ggml type
 * u32, offset u64 from the data section); padding to general.alignment (default 32); the data section.
 *
 * qlt_gguf_open checks everything before anything is used: every length, count and offset against the
 * bytes left in the file (so a header claiming 2^60 of anything is refused, never allocated), each dims
 * product and byte size for 64-bit overflow, a tensor's row length against its type's block, offsets
 * aligned and inside the data section, tensors not overlapping, keys and tensor names unique. Errors are
 * one line naming the file and the key or tensor. After a successful open every accessor is safe. */
#ifndef QLT_GGUF_H
#define QLT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#define QLT_GGUF_MAX_DIMS 4
#define QLT_GGUF_DEFAULT_ALIGNMENT 32

/* Value types of the key/value section, numbered as the file stores them. */
typedef enum qlt_gguf_vtype {
    QLT_GGUF_VAL_U8 = 0,
    QLT_GGUF_VAL_I8 = 1,
    QLT_GGUF_VAL_U16 = 2,
    QLT_GGUF_VAL_I16 = 3,
    QLT_GGUF_VAL_U32 = 4,
    QLT_GGUF_VAL_I32 = 5,
    QLT_GGUF_VAL_F32 = 6,
    QLT_GGUF_VAL_BOOL = 7,
    QLT_GGUF_VAL_STRING = 8,
    QLT_GGUF_VAL_ARRAY = 9,
    QLT_GGUF_VAL_U64 = 10,
    QLT_GGUF_VAL_I64 = 11,
    QLT_GGUF_VAL_F64 = 12,
    QLT_GGUF_VAL_COUNT
} qlt_gguf_vtype;

/* ggml tensor types this reader dequantizes (numbered as ggml numbers them); other ggml types are
 * recognised by name and size (so their files open) but not dequantized. */
enum {
    QLT_GGML_F32 = 0,
    QLT_GGML_F16 = 1,
    QLT_GGML_Q4_0 = 2,
    QLT_GGML_Q4_1 = 3,
    QLT_GGML_Q5_0 = 6,
    QLT_GGML_Q5_1 = 7,
    QLT_GGML_Q8_0 = 8,
    QLT_GGML_Q4_K = 12,
    QLT_GGML_Q5_K = 13,
    QLT_GGML_Q6_K = 14,
    QLT_GGML_BF16 = 30,
};

typedef struct qlt_gguf_kv {
    char *key;              /* NUL-terminated copy */
    qlt_gguf_vtype type;
    qlt_gguf_vtype elem_type; /* arrays: the elements' type */
    uint64_t count;         /* arrays: number of elements; 1 otherwise */
    const uint8_t *data;    /* the value in the map: a scalar, a string's length field, an array's first element */
} qlt_gguf_kv;

typedef struct qlt_gguf_tensor {
    char *name;             /* NUL-terminated copy */
    uint32_t type;          /* ggml type */
    int ndim;
    int64_t ne[QLT_GGUF_MAX_DIMS]; /* ne[0] innermost (a row's length); unused dims are 1 */
    int64_t numel;
    uint64_t offset;        /* from the start of the data section */
    const void *data;       /* in the map */
    uint64_t nbytes;
} qlt_gguf_tensor;

typedef struct qlt_gguf {
    char *path;
    void *map;              /* whole file, read-only */
    size_t map_size;
    uint32_t version;
    uint64_t alignment;     /* general.alignment or 32 */
    uint64_t data_offset;   /* where the data section starts */
    int64_t n_kv;
    qlt_gguf_kv *kv;        /* [n_kv], file order */
    int64_t n_tensors;
    qlt_gguf_tensor *tensors; /* [n_tensors], file order */
    int64_t *by_name;       /* [n_tensors] indices of tensors sorted by name */
} qlt_gguf;

/* Opens and validates path. 0, or -1 with a one-line qlt_fail naming the file (and key or tensor). */
int qlt_gguf_open(qlt_gguf *g, const char *path);
void qlt_gguf_close(qlt_gguf *g);
/* True when the file at path starts with the GGUF magic (false for directories and unreadable paths). */
int qlt_gguf_is_gguf(const char *path);

/* NULL when absent. */
const qlt_gguf_kv *qlt_gguf_find_kv(const qlt_gguf *g, const char *key);
const qlt_gguf_tensor *qlt_gguf_find_tensor(const qlt_gguf *g, const char *name);

/* Typed reads of key/values. Each returns 1 when found (value in *out), 0 when absent (*out = def),
 * -1 with qlt_fail naming the file and key when the value has another type or does not fit. */
int qlt_gguf_get_int(const qlt_gguf *g, const char *key, int64_t def, int64_t *out);   /* any integer type */
int qlt_gguf_get_float(const qlt_gguf *g, const char *key, double def, double *out);  /* F32, F64 or integer */
int qlt_gguf_get_bool(const qlt_gguf *g, const char *key, int def, int *out);
/* A string value: *s points into the map (not NUL-terminated), *len its bytes; absent: *s = NULL, *len = 0. */
int qlt_gguf_get_string(const qlt_gguf *g, const char *key, const char **s, uint64_t *len);
/* An array whose elements have type elem (QLT_GGUF_VAL_COUNT: any): *out the kv, NULL when absent. */
int qlt_gguf_get_array(const qlt_gguf *g, const char *key, qlt_gguf_vtype elem, const qlt_gguf_kv **out);

/* Walks a string array: *p starts at kv->data; each call sets *s, *len to the next element and advances
 * *p (the caller counts kv->count calls). Safe after qlt_gguf_open validated the array. */
void qlt_gguf_next_string(const uint8_t **p, const char **s, uint64_t *len);
/* Element i of a numeric array as int64 / double (integer, float and bool element types). */
int64_t qlt_gguf_array_int(const qlt_gguf_kv *kv, uint64_t i);
double qlt_gguf_array_float(const qlt_gguf_kv *kv, uint64_t i);
/* The value type's name ("u32", "string", "array", ...). */
const char *qlt_gguf_vtype_name(qlt_gguf_vtype t);

/* ggml type traits: name ("Q4_K"; "unknown" for an id ggml does not define), elements per block and bytes
 * per block (0 for an unknown type). */
const char *qlt_ggml_type_name(uint32_t type);
int64_t qlt_ggml_type_block(uint32_t type);
int64_t qlt_ggml_type_block_bytes(uint32_t type);

/* "a, b": a tensor's dims as Hugging Face orders them (outermost first: [rows, cols] for a matrix). */
void qlt_gguf_format_shape(char *buf, size_t size, const qlt_gguf_tensor *t);

#endif
