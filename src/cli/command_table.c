/* command_table.c: the list of `qlora-train` commands (one line per command, kept in help order). */
#include <stddef.h>

#include "cli/commands.h"

const qlt_command qlt_commands[] = {
    {"tokenize", "encode text to token ids or decode ids (tokenizer.json), or benchmark the tokenizer", qlt_cmd_tokenize},
    {NULL, NULL, NULL},
};
