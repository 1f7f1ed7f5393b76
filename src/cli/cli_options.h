/* cli_options.h: one option table per command (name, argument, default, help): each command's parser walks
 * argv through it and its --help prints it, so what a command accepts and what its help lists are one list. */
#ifndef QLT_CLI_OPTIONS_H
#define QLT_CLI_OPTIONS_H

#include <stdio.h>

typedef struct qlt_cli_option {
    const char *name; /* "--micro-batch" */
    const char *arg;  /* the value it takes ("N"), or NULL for a flag */
    const char *def;  /* its default as text ("4"), or NULL when it has none */
    const char *help; /* one line */
} qlt_cli_option;
/* A table is an array of options ending with {NULL}. */

/* The options every configured command shares (the first rows of their tables). */
#define QLT_CLI_OPT_CONFIG {"--config", "FILE", "none: defaults only", "the run configuration (YAML or JSON; docs/CONFIG.md)"}
#define QLT_CLI_OPT_SET                                                                                           \
    {"--set", "SECTION.KEY=VALUE", "none", "override one configuration key, after the file (repeatable)"}

enum { QLT_CLI_END = -1, QLT_CLI_POSITIONAL = -2, QLT_CLI_HELP = -3, QLT_CLI_ERROR = -4 };

/* The index of option `name` in opts, or -1. */
int qlt_cli_option_find(const qlt_cli_option *opts, const char *name);
/* The next argument of argv after *i (start with *i = 0; argv[0] is the command): the option's index in opts
 * with *value its argument (NULL for a flag); QLT_CLI_POSITIONAL with *value the argument when it is not an
 * option; QLT_CLI_HELP for --help / -h; QLT_CLI_END after the last; QLT_CLI_ERROR with qlt_fail ("unknown
 * option '--x' (see `qlora-train CMD --help`)", "--seq needs a value N"). */
int qlt_cli_next(const char *cmd, const qlt_cli_option *opts, int argc, char **argv, int *i, const char **value);
/* "options:" and one line per option: name, argument, help and "(default: ...)". */
void qlt_cli_print_options(FILE *out, const qlt_cli_option *opts);

#endif
