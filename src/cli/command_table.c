/* command_table.c: the list of `qlora-train` commands (one line per command, kept in help order). */
#include <stddef.h>

#include "cli/commands.h"

const qlt_command qlt_commands[] = {
    {NULL, NULL, NULL},
};
