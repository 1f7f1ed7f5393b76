/* tensorboard.h: a TensorBoard events file (output.tensorboard) written without TensorFlow: TFRecord framing
 * around hand-encoded tensorflow.Event protobufs holding scalar summaries. The CRC-32C and the framing are
 * public so the tests can read the file back with the same checks TensorBoard makes. */
#ifndef QLT_TENSORBOARD_H
#define QLT_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct qlt_tensorboard {
    FILE *f;
    char *path; /* output.dir/events.out.tfevents.<unix time>.<host> */
} qlt_tensorboard;

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes, continuing from crc (0 to start). */
uint32_t qlt_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 of the CRC-32C of the bytes. */
uint32_t qlt_tfrecord_masked_crc(const void *data, size_t n);

/* Creates dir/events.out.tfevents.<time>.<host> and writes the file_version event ("brain.Event:2"). */
int qlt_tensorboard_open(qlt_tensorboard *tb, const char *dir);
/* One event at `step` holding a scalar summary per (tags[i], values[i]), i < n; wall_time = now. */
int qlt_tensorboard_scalars(qlt_tensorboard *tb, int64_t step, const char *const *tags, const double *values, int n);
/* Closes the file (safe on a zeroed or closed writer); 0, or -1 when the data could not be written. */
int qlt_tensorboard_close(qlt_tensorboard *tb);

#endif
