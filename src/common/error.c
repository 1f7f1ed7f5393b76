/* error.c: the thread-local error line and the never-NULL allocators (see error.h). */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char error_line[2048];

int qlt_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_line, sizeof error_line, fmt, ap);
    va_end(ap);
    return -1;
}

int qlt_fail_context(const char *fmt, ...) {
    char prefix[1024], old[sizeof error_line];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_line, sizeof old);
    snprintf(error_line, sizeof error_line, "%.1000s: %.1000s", prefix, old);
    return -1;
}

const char *qlt_error(void) { return error_line; }

void qlt_error_clear(void) { error_line[0] = '\0'; }

void qlt_assert_failed(const char *expr, const char *file, int line) {
    fprintf(stderr, "qlora-train: internal error: assertion `%s` failed at %s:%d\n", expr, file, line);
    abort();
}

static void out_of_memory(size_t bytes) {
    fprintf(stderr, "qlora-train: error: out of host memory allocating %zu bytes\n", bytes);
    exit(1);
}

void *qlt_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) out_of_memory(bytes);
    return p;
}

void *qlt_xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_memory(count * size);
    return p;
}

void *qlt_xrealloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) out_of_memory(bytes);
    return q;
}

char *qlt_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = qlt_xmalloc(n);
    memcpy(p, s, n);
    return p;
}
