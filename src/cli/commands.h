/* commands.h: one entry point per `qlora-train <command>`; each lives in src/cli/cmd_<command>.c,
 * parses its own arguments, prints its own usage, and returns the process exit status (0 = ok).
 * Errors are printed by the command as one line: "qlora-train: error: <what and what to do>". */
#ifndef QLT_COMMANDS_H
#define QLT_COMMANDS_H

#include "cli/cli_options.h"

typedef struct qlt_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
    const qlt_cli_option *options;     /* what it accepts and its --help lists */
} qlt_command;

/* The table of commands, terminated by a {NULL} entry (src/cli/command_table.c). */
extern const qlt_command qlt_commands[];

/* Each command's option table (cmd_<command>.c). */
extern const qlt_cli_option qlt_train_options[], qlt_eval_options[], qlt_generate_options[], qlt_inspect_options[],
    qlt_tokenize_options[], qlt_bench_options[], qlt_merge_options[], qlt_quantize_options[], qlt_plot_options[],
    qlt_sweep_cli_options[];

int qlt_cmd_train(int argc, char **argv);
int qlt_cmd_eval(int argc, char **argv);
int qlt_cmd_generate(int argc, char **argv);
int qlt_cmd_inspect(int argc, char **argv);
int qlt_cmd_tokenize(int argc, char **argv);
int qlt_cmd_quantize(int argc, char **argv);
int qlt_cmd_bench(int argc, char **argv);
int qlt_cmd_merge(int argc, char **argv);
int qlt_cmd_sweep(int argc, char **argv);
int qlt_cmd_plot(int argc, char **argv);
/* `inspect` for a .gguf file (cmd_inspect_gguf.c); check: read every value too. */
int qlt_cmd_inspect_gguf(const char *path, int check);

/* Prints "qlora-train: error: <qlt_error()>" on stderr and returns 1. */
int qlt_cli_report_error(void);

#endif
