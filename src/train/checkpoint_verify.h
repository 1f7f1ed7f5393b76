/* checkpoint_verify.h: what lets resume trust a checkpoint. When a checkpoint is written, each of its files'
 * size and CRC-32 go into trainer_state.json (a "files" map: name -> {bytes, crc32}), with two fingerprints
 * of what it was trained against: the base model (its architecture values and frozen tensor shapes) and the
 * tokenizer file. Resume checks all three before it loads anything, and each refusal is one line naming the
 * checkpoint and what differs. */
#ifndef QLT_CHECKPOINT_VERIFY_H
#define QLT_CHECKPOINT_VERIFY_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "config/config.h"
#include "model/model_config.h"

/* {"NAME": {"bytes": N, "crc32": "xxxxxxxx"}, ...} for every regular file of dir except trainer_state.json,
 * each fsynced on the way (they are about to be renamed into place). NULL with qlt_fail when one cannot be
 * read. */
cJSON *qlt_ckpt_files_record(const char *dir);
/* Every file the map names is in dir with that size and CRC-32: 0, or -1 naming the file, what differs and
 * what to do. */
int qlt_ckpt_files_verify(const char *dir, const cJSON *files);
/* 16 hex digits: a hash of the model's architecture values (architecture, sizes, vocabulary, RoPE, norms)
 * and the shape of every frozen tensor they imply. */
void qlt_ckpt_model_fingerprint(const qlt_model_config *mc, char out[17]);
/* What identifies the run's tokenizer: "none" (data.format tokens: no tokenizer), "model" (the tokenizer of a GGUF file,
 * not hashed: gigabytes), or 16 hex digits hashing the tokenizer file's bytes. */
void qlt_ckpt_tokenizer_id(const qlt_config *cfg, char out[24]);

#endif
