/* tensorboard.c: the events file TensorBoard reads (see tensorboard.h). Each record is
 *   uint64 length (little endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data
 * and each data is a serialized tensorflow.Event:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 * encoded by hand (varint keys and lengths, little-endian fixed64 / fixed32 numbers). */
#define _GNU_SOURCE
#include "train/tensorboard.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"

static uint32_t crc32c_table[256];

static void crc32c_make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[i] = c;
    }
}

uint32_t qlt_crc32c(uint32_t crc, const void *data, size_t n) {
    if (!crc32c_table[1]) crc32c_make_table(); /* entry 1 is nonzero once made */
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t qlt_tfrecord_masked_crc(const void *data, size_t n) {
    uint32_t c = qlt_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* A growing byte buffer for one protobuf message. */
typedef struct pb_buf {
    uint8_t *p;
    size_t n, cap;
} pb_buf;

static void pb_put(pb_buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = qlt_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void pb_varint(pb_buf *b, uint64_t v) {
    uint8_t bytes[10];
    int n = 0;
    do {
        bytes[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) bytes[n] |= 0x80;
        n++;
    } while (v);
    pb_put(b, bytes, (size_t)n);
}

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static void pb_key(pb_buf *b, int field, int wire) { pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire); }

static void pb_le(pb_buf *b, uint64_t v, int bytes) {
    uint8_t out[8];
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
    pb_put(b, out, (size_t)bytes);
}

static void pb_double(pb_buf *b, int field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    pb_key(b, field, WIRE_FIXED64);
    pb_le(b, bits, 8);
}

static void pb_float(pb_buf *b, int field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    pb_key(b, field, WIRE_FIXED32);
    pb_le(b, bits, 4);
}

static void pb_bytes(pb_buf *b, int field, const void *data, size_t n) {
    pb_key(b, field, WIRE_LEN);
    pb_varint(b, n);
    pb_put(b, data, n);
}

static double wall_time_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static int write_record(qlt_tensorboard *tb, const pb_buf *event) {
    uint8_t header[8];
    for (int i = 0; i < 8; i++) header[i] = (uint8_t)((uint64_t)event->n >> (8 * i));
    uint32_t header_crc = qlt_tfrecord_masked_crc(header, 8), data_crc = qlt_tfrecord_masked_crc(event->p, event->n);
    uint8_t crc_bytes[2][4];
    for (int i = 0; i < 4; i++) {
        crc_bytes[0][i] = (uint8_t)(header_crc >> (8 * i));
        crc_bytes[1][i] = (uint8_t)(data_crc >> (8 * i));
    }
    int ok = fwrite(header, 1, 8, tb->f) == 8 && fwrite(crc_bytes[0], 1, 4, tb->f) == 4 &&
             fwrite(event->p, 1, event->n, tb->f) == event->n && fwrite(crc_bytes[1], 1, 4, tb->f) == 4 &&
             fflush(tb->f) == 0;
    return ok ? 0 : qlt_fail("%s: write failed (disk full?)", tb->path);
}

int qlt_tensorboard_open(qlt_tensorboard *tb, const char *dir) {
    memset(tb, 0, sizeof *tb);
    char host[256] = "localhost", name[320];
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    double now = wall_time_now();
    snprintf(name, sizeof name, "events.out.tfevents.%lld.%s", (long long)now, host);
    tb->path = qlt_path_join(dir, name);
    tb->f = fopen(tb->path, "wb");
    if (!tb->f) {
        qlt_fail("%s: cannot create the TensorBoard events file (output.tensorboard): check output.dir", tb->path);
        free(tb->path);
        tb->path = NULL;
        return -1;
    }
    pb_buf e = {0};
    pb_double(&e, 1, now);
    pb_bytes(&e, 3, "brain.Event:2", 13);
    int rc = write_record(tb, &e);
    free(e.p);
    return rc;
}

int qlt_tensorboard_scalars(qlt_tensorboard *tb, int64_t step, const char *const *tags, const double *values, int n) {
    if (!tb->f) return 0;
    pb_buf summary = {0}, value = {0}, e = {0};
    for (int i = 0; i < n; i++) {
        value.n = 0;
        pb_bytes(&value, 1, tags[i], strlen(tags[i]));
        pb_float(&value, 2, (float)values[i]);
        pb_bytes(&summary, 1, value.p, value.n);
    }
    pb_double(&e, 1, wall_time_now());
    pb_key(&e, 2, WIRE_VARINT);
    pb_varint(&e, (uint64_t)step);
    pb_bytes(&e, 5, summary.p, summary.n);
    int rc = write_record(tb, &e);
    free(summary.p);
    free(value.p);
    free(e.p);
    return rc;
}

int qlt_tensorboard_close(qlt_tensorboard *tb) {
    int rc = 0;
    if (tb->f && fclose(tb->f) != 0) rc = qlt_fail("%s: write failed", tb->path);
    free(tb->path);
    memset(tb, 0, sizeof *tb);
    return rc;
}
