/* error.h: how qlora-train reports failures.
 *
 * User-facing errors: a function that can fail returns int (0 = ok, -1 = failed) and records one line
 * with qlt_fail(), naming the file / line / key / tensor and what to do. The caller either adds nothing
 * and returns -1, or the CLI prints the line and exits non-zero. The message lives in a thread-local
 * buffer (like errno), so worker threads never clobber each other's messages.
 *
 * Internal invariants: QLT_ASSERT is never compiled out; it prints the statement, file and line. */
#ifndef QLT_ERROR_H
#define QLT_ERROR_H

#include <stddef.h>

/* Records the message (printf-style) and returns -1, so `return qlt_fail(...)` reads naturally. */
int qlt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prefixes the current message with more context: "ctx: old message". Returns -1. */
int qlt_fail_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last message recorded on this thread ("" if none). */
const char *qlt_error(void);
void qlt_error_clear(void);

#define QLT_TRY(expr)                                                                               \
    do {                                                                                            \
        if ((expr) != 0) return -1;                                                                 \
    } while (0)

void qlt_assert_failed(const char *expr, const char *file, int line) __attribute__((noreturn));
#define QLT_ASSERT(cond)                                                                            \
    do {                                                                                            \
        if (!(cond)) qlt_assert_failed(#cond, __FILE__, __LINE__);                                  \
    } while (0)

/* Allocation that never returns NULL: out of host memory is reported with the size and exits (status 1). */
void *qlt_xmalloc(size_t bytes);
void *qlt_xcalloc(size_t count, size_t size);
void *qlt_xrealloc(void *p, size_t bytes);
char *qlt_xstrdup(const char *s);

#endif
