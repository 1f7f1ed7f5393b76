/* cli_config.h: the options every configured command shares: --config FILE, --set section.key=value
 * (repeatable), parsed into a validated qlt_config. */
#ifndef QLT_CLI_CONFIG_H
#define QLT_CLI_CONFIG_H

#include <stdint.h>

#include "cli/cli_options.h"
#include "config/config.h"

typedef struct qlt_cli_args {
    const char *config_path; /* NULL: defaults only */
    const char *resume;      /* --resume auto|DIR (train) */
    const char *adapter;     /* --adapter DIR (eval, generate, merge) */
    int dry_run;             /* --dry-run (train) */
    int help;
    const char *positional[2]; /* arguments that are not options, in order */
    int n_positional;
} qlt_cli_args;

/* Parses argv (argv[0] = command `cmd`) with the command's option table (cli_options.h): --config, --set,
 * --resume, --adapter and --dry-run are read here, the table's other options are skipped (the command reads
 * them), anything not in the table is an error. Fills cfg in layers (defaults, the file, the environment
 * variables that mirror keys, every --set in order), records where each value came from, validates it.
 * Returns 0, or -1 with qlt_fail (unknown option, bad value, ...). */
int qlt_cli_load_config(const char *cmd, int argc, char **argv, const qlt_cli_option *opts, qlt_cli_args *args,
                        qlt_config *cfg);

/* A command-line flag's integer value in [min, max]: 0, or -1 with "FLAG: expected an integer in [min, max],
 * got 'V'". */
int qlt_cli_parse_int(const char *flag, const char *v, int min, int max, int *out);

/* A size such as 5GB, 500MB, 64KB or 1000 (bytes; decimal units, as Hugging Face's max_shard_size): 0, or -1
 * with "FLAG 'V': give a size like 5GB or 500MB". */
int qlt_cli_parse_size(const char *flag, const char *v, int64_t *out);

#endif
