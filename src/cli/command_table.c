/* command_table.c: the list of `qlora-train` commands (one line per command, kept in help order). */
#include <stddef.h>

#include "cli/commands.h"

const qlt_command qlt_commands[] = {
    {"train", "fine-tune LoRA adapters (--config FILE, --resume auto|DIR)", qlt_cmd_train},
    {"eval", "loss and perplexity of a model (+ adapter) on a dataset", qlt_cmd_eval},
    {"tokenize", "encode text to token ids or decode ids (tokenizer.json), or benchmark the tokenizer", qlt_cmd_tokenize},
    {NULL, NULL, NULL},
};
