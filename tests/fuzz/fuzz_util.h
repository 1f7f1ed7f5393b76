/* fuzz_util.h: what the libFuzzer harnesses share. Many loaders take a path, so each harness writes the
 * fuzzer's bytes into a file of one temporary directory per process; and some loaders read several files,
 * which the harness carves out of one input with fuzz_split. */
#ifndef QLT_FUZZ_UTIL_H
#define QLT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The process's temporary directory (made on first use, removed at exit). */
const char *fuzz_dir(void);
/* Writes len bytes to fuzz_dir()/name and returns the path (owned by the caller). */
char *fuzz_write(const char *name, const uint8_t *data, size_t len);
/* Removes fuzz_dir()/name (a file), ignoring a missing one. */
void fuzz_unlink(const char *name);

/* Splits an input into at most max parts at each occurrence of the separator line "\n--8<--\n"; parts[i] /
 * lens[i] point into data. Returns the number of parts (>= 1). */
int fuzz_split(const uint8_t *data, size_t size, const uint8_t **parts, size_t *lens, int max);

/* Loads tests/data/fixtures/<fixture>/tokenizer.json; with llama3 set, Llama-3's chat tokens
 * (<|begin_of_text|>, <|start_header_id|>, <|end_header_id|>, <|eot_id|>) are added first, as the fixtures
 * hold only chatml's. Aborts on failure. */
struct qlt_tokenizer;
struct qlt_tokenizer *fuzz_fixture_tokenizer(const char *fixture, int llama3);

/* A parser must either succeed or fail with one line: checks that the error message is not empty and has no
 * newline, and aborts (a finding) otherwise. With FUZZ_VERBOSE set it prints each result (to see why a seed
 * is rejected). */
void fuzz_check_error(int rc);

#endif
