/* run_tokenizer.h: the tokenizer a run's text goes through: data.tokenizer when it names a tokenizer.json, else a
 * GGUF model's own (built from its metadata), else the tokenizer.json beside the model. One resolution for the
 * commands that encode or decode text themselves (generate, the trainer's sample answers). */
#ifndef QLT_RUN_TOKENIZER_H
#define QLT_RUN_TOKENIZER_H

#include "config/config.h"
#include "tokenizer/tokenizer.h"

/* 0, or -1 with qlt_fail naming the key (data.tokenizer) or the model file. */
int qlt_run_tokenizer_open(const qlt_config *cfg, qlt_tokenizer **out);

#endif
