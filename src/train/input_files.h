/* input_files.h: every file a run reads, checked to exist and be readable before anything slow happens (the
 * backend, the model load), so a wrong path fails in milliseconds with the file and the key that named it. */
#ifndef QLT_INPUT_FILES_H
#define QLT_INPUT_FILES_H

#include "config/config.h"

/* Checks model.path (a directory's config.json, a .gguf file, random:'s config.json), the tokenizer the data
 * (or output.sample_prompt, when training) needs, the data files (training: data.train and data.eval;
 * evaluation: data.eval, else data.train) and lora.init_from's adapter files. 0, or -1 with a one-line
 * qlt_fail naming the key and the file: "data.tokenizer: x/tokenizer.json: No such file or directory (...)". */
int qlt_check_input_files(const qlt_config *cfg, int training);

#endif
