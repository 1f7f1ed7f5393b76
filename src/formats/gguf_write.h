/* gguf_write.h: writes GGUF v3 files, the model format of llama.cpp (ggml's gguf.h documents it): metadata
 * key/values, then one info record per tensor, then the tensors' data, each aligned to 32 bytes. Everything
 * is declared first (keys and tensors with their types), then the data is streamed tensor by tensor in
 * declaration order, so host memory holds one tensor; the file is written under a temporary name and
 * renamed when complete.
 *
 * The tensor types here are the ones a merged model is written in (ggml's type numbers): F32, F16, BF16 and
 * Q8_0. Q8_0 is ggml's block of 32 values: a float16 scale d = max|x| / 127 (rounded to nearest even) and
 * 32 int8 codes round(x / d) (round half away from zero, x times the float32 1 / d), 34 bytes a block, as
 * ggml-quants.c's reference quantize_row_q8_0 defines it.
 *
 * Shapes are GGUF's: ne[0] is the innermost (contiguous) dimension, so a row-major torch [rows, cols]
 * matrix is ne = {cols, rows}. */
#ifndef QLT_GGUF_WRITE_H
#define QLT_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "common/fileutil.h"

typedef enum qlt_gguf_type { /* ggml_type numbers */
    QLT_GGUF_F32 = 0,
    QLT_GGUF_F16 = 1,
    QLT_GGUF_Q8_0 = 8,
    QLT_GGUF_BF16 = 30,
} qlt_gguf_type;

#define QLT_GGUF_VERSION 3
#define QLT_GGUF_ALIGNMENT 32
#define QLT_GGUF_Q8_0_BLOCK 32
#define QLT_GGUF_Q8_0_BYTES 34 /* float16 scale + 32 int8 codes */
#define QLT_GGUF_MAX_DIMS 4

/* "F32", "F16", "BF16", "Q8_0". */
const char *qlt_gguf_type_name(qlt_gguf_type t);
/* Bytes of n values of type t (Q8_0: n a multiple of 32). */
int64_t qlt_gguf_nbytes(qlt_gguf_type t, int64_t n);

/* Q8_0 of n values (n a multiple of 32) into out [n / 32 * 34 bytes]. */
void qlt_gguf_quantize_q8_0(const float *x, void *out, int64_t n);
/* Back to float32: out[i] = code * float(d). */
void qlt_gguf_dequantize_q8_0(const void *in, float *out, int64_t n);

typedef struct qlt_gguf_tensor_info {
    char *name;
    int ndim;
    int64_t ne[QLT_GGUF_MAX_DIMS];
    qlt_gguf_type type;
    int64_t offset; /* from the start of the data section */
    int64_t nbytes;
} qlt_gguf_tensor_info;

typedef struct qlt_gguf_writer {
    unsigned char *kv;     /* the metadata key/values as they go in the file */
    size_t kv_len, kv_cap;
    int64_t n_kv;
    qlt_gguf_tensor_info *tensors;
    int n_tensors, cap_tensors;
    int64_t data_bytes;    /* the data section so far (aligned) */
    qlt_atomic_file file;  /* open between begin and finish */
    int next;              /* the next tensor whose data write_data expects */
    int64_t written;       /* bytes of the data section written */
} qlt_gguf_writer;

void qlt_gguf_writer_init(qlt_gguf_writer *w);
void qlt_gguf_writer_free(qlt_gguf_writer *w); /* removes the temporary file if begin ran and finish did not */

/* Metadata, in the order they will appear. Strings are UTF-8 (any bytes; length-prefixed in the file). */
void qlt_gguf_add_u32(qlt_gguf_writer *w, const char *key, uint32_t v);
void qlt_gguf_add_i32(qlt_gguf_writer *w, const char *key, int32_t v);
void qlt_gguf_add_f32(qlt_gguf_writer *w, const char *key, float v);
void qlt_gguf_add_bool(qlt_gguf_writer *w, const char *key, int v);
void qlt_gguf_add_string(qlt_gguf_writer *w, const char *key, const char *v);
void qlt_gguf_add_string_array(qlt_gguf_writer *w, const char *key, const char *const *v, int64_t n);
void qlt_gguf_add_i32_array(qlt_gguf_writer *w, const char *key, const int32_t *v, int64_t n);

/* Declares a tensor of ndim <= 4 dims ne (ne[0] innermost). 0, or -1 with qlt_fail naming it (Q8_0 needs
 * ne[0] a multiple of 32). */
int qlt_gguf_add_tensor(qlt_gguf_writer *w, const char *name, int ndim, const int64_t *ne, qlt_gguf_type type);
/* Writes the header, the metadata and the tensor infos to path's temporary file. 0, or -1 with qlt_fail. */
int qlt_gguf_begin(qlt_gguf_writer *w, const char *path);
/* The data of the next declared tensor: exactly its nbytes (and the padding after it). */
int qlt_gguf_write_data(qlt_gguf_writer *w, const void *data, int64_t nbytes);
/* Checks every tensor was written, then syncs and renames the file to path. 0, or -1 with qlt_fail. */
int qlt_gguf_finish(qlt_gguf_writer *w);

#endif
