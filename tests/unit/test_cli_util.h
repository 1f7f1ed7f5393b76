/* test_cli_util.h: a tiny run for the CLI tests (test_cli_*.c): a random-weight 2-layer Llama with the demo's
 * tokenizer, a few lines of text, the CPU, one step; everything in a fresh temporary directory. */
#ifndef QLT_TEST_CLI_UTIL_H
#define QLT_TEST_CLI_UTIL_H

/* Makes a temporary directory holding train.jsonl (n_lines lines of text) and run.yaml (the tiny run; train.lr on
 * line 9; then `extra`: more top-level sections, e.g. "lora:\n  r: 4\n", or NULL) and returns it (heap). The
 * run's output.dir is DIR/run; other keys are changed with --set. */
char *cli_tiny_dir(int n_lines, const char *extra);
/* DIR/name (heap). */
char *cli_path(const char *dir, const char *name);
/* Runs the binary in the repository root (the demo model's paths are relative to it). */
int cli_run(const char *args, char **out);
/* Number of times needle occurs in s. */
int cli_count(const char *s, const char *needle);

#endif
