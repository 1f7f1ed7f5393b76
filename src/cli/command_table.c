/* command_table.c: the list of `qlora-train` commands (one line per command, kept in help order). */
#include <stddef.h>

#include "cli/commands.h"

int qlt_cmd_train(int argc, char **argv);
int qlt_cmd_eval(int argc, char **argv);
int qlt_cmd_inspect(int argc, char **argv);

const qlt_command qlt_commands[] = {
    {"train", "fine-tune LoRA adapters (--config FILE, --resume auto|DIR)", qlt_cmd_train},
    {"eval", "loss and perplexity of a model (+ adapter) on a dataset", qlt_cmd_eval},
    {"inspect", "architecture, tensors, bytes and NF4 footprint of a model directory", qlt_cmd_inspect},
    {NULL, NULL, NULL},
};
