/* safetensors_shards.h: writes a model's tensors as Hugging Face does: one model.safetensors, or, past a
 * size, model-0000K-of-0000N.safetensors shards and model.safetensors.index.json (metadata.total_size and a
 * weight_map from tensor name to shard). Tensors are added in any order; a shard is written as soon as it
 * holds max_bytes, so host memory stays about one shard. Shards are written under temporary names and
 * renamed once their count is known, so the directory should itself be a temporary one (fileutil.h). */
#ifndef QLT_SAFETENSORS_SHARDS_H
#define QLT_SAFETENSORS_SHARDS_H

#include <stdint.h>

#include "formats/safetensors.h"

struct cJSON;

typedef struct qlt_st_shards {
    char *dir;               /* where the shards go (owned) */
    qlt_st_writer w;         /* the shard being filled: add to it directly, then qlt_st_shards_account */
    int64_t w_bytes;         /* bytes in w so far */
    int64_t max_bytes;       /* a shard is written once it holds this many */
    int64_t total_bytes;     /* every tensor's bytes (the index's metadata.total_size) */
    int n;                   /* shards written */
    struct cJSON *weight_map; /* tensor name -> shard number, renamed at the end */
} qlt_st_shards;

void qlt_st_shards_init(qlt_st_shards *s, const char *dir, int64_t max_bytes);
/* Adds one tensor (copied) and counts its bytes: 0, or -1 with qlt_fail when writing a full shard failed. */
int qlt_st_shards_add(qlt_st_shards *s, const char *name, qlt_dtype dtype, int ndim, const int64_t *shape,
                      const void *data);
/* Counts bytes just added to s->w by hand (several tensors of one module, say) and writes the shard when full. */
int qlt_st_shards_account(qlt_st_shards *s, int64_t bytes);
/* Writes the last shard and gives every shard its final name (model.safetensors when there is one; else
 * model-0000K-of-0000N.safetensors and the index). 0, or -1 with qlt_fail. */
int qlt_st_shards_finish(qlt_st_shards *s);
void qlt_st_shards_free(qlt_st_shards *s);

#endif
