/* safetensors.h: reading (mmap, validated) and writing (atomic) of .safetensors files, and sharded
 * model directories (model.safetensors.index.json).
 *
 * Everything in a file is validated before use: the header length lies inside the file, the header is a
 * JSON object, every tensor has a known dtype, a shape of non-negative dims, data_offsets [begin, end)
 * inside the data area with end - begin == product(shape) * dtype size, and no two tensors overlap.
 * Errors name the file and the tensor. */
#ifndef QLT_SAFETENSORS_H
#define QLT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

#define QLT_MAX_DIMS 8

typedef struct qlt_st_tensor {
    char *name;
    qlt_dtype dtype;
    int ndim;
    int64_t shape[QLT_MAX_DIMS];
    int64_t numel;
    const void *data; /* points into the mapped file */
    size_t nbytes;
} qlt_st_tensor;

typedef struct qlt_st_file {
    char *path;
    void *map;        /* whole file, read-only */
    size_t map_size;
    int n_tensors;
    qlt_st_tensor *tensors; /* sorted by name */
    char *metadata_json;    /* the "__metadata__" object as JSON text, or NULL */
} qlt_st_file;

int qlt_st_open(qlt_st_file *f, const char *path);
void qlt_st_close(qlt_st_file *f);
/* NULL when absent. */
const qlt_st_tensor *qlt_st_find(const qlt_st_file *f, const char *name);
/* "a, b, c": a shape's dims, for messages and JSON (NUL-terminated, cut to size). */
void qlt_st_format_shape(char *buf, size_t size, int ndim, const int64_t *shape);
/* Copies a float tensor (F32/F16/BF16/F64) into float32 dst (numel elements). */
void qlt_st_read_f32(const qlt_st_tensor *t, float *dst);
/* Counts a float tensor's NaN and infinite values (0 for other dtypes); *first: the index of the first
 * non-finite value, or -1. Reads the mapped data once (exponent bits, no conversion). */
void qlt_st_count_nonfinite(const qlt_st_tensor *t, int64_t *nan, int64_t *inf, int64_t *first);

/* A model directory: one model.safetensors, or shards listed by model.safetensors.index.json
 * (or, with neither, every *.safetensors file in the directory). */
typedef struct qlt_st_dir {
    int n_files;
    qlt_st_file *files;
} qlt_st_dir;

int qlt_st_dir_open(qlt_st_dir *d, const char *dir);
void qlt_st_dir_close(qlt_st_dir *d);
/* NULL when absent (in any shard). */
const qlt_st_tensor *qlt_st_dir_find(const qlt_st_dir *d, const char *name);

/* Writer: add tensors (data is copied or referenced until qlt_st_write), then write atomically
 * (to path.tmp-<pid>, fsync, rename). */
typedef struct qlt_st_writer {
    int n, cap;
    struct qlt_st_wtensor {
        char *name;
        qlt_dtype dtype;
        int ndim;
        int64_t shape[QLT_MAX_DIMS];
        void *data; /* owned copy */
        size_t nbytes;
    } *items;
    char *metadata_json; /* optional "__metadata__" object (string values only), owned */
} qlt_st_writer;

void qlt_st_writer_init(qlt_st_writer *w);
/* Copies nbytes of data. */
void qlt_st_writer_add(qlt_st_writer *w, const char *name, qlt_dtype dtype, int ndim, const int64_t *shape,
                       const void *data);
/* metadata: JSON object text with string values, e.g. {"format":"pt"} */
void qlt_st_writer_set_metadata(qlt_st_writer *w, const char *metadata_json);
int qlt_st_writer_write(qlt_st_writer *w, const char *path);
void qlt_st_writer_free(qlt_st_writer *w);

#endif
