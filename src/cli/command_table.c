/* command_table.c: the list of `qlora-train` commands (one line per command, kept in help order). */
#include <stddef.h>

#include "cli/commands.h"

int qlt_cmd_quantize(int argc, char **argv);

const qlt_command qlt_commands[] = {
    {"quantize", "write a bitsandbytes 4-bit NF4 checkpoint of a model", qlt_cmd_quantize},
    {NULL, NULL, NULL},
};
