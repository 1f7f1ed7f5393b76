/* error.c: the thread-local error line and the never-NULL allocators (see error.h). */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char error_line[2048];

/* Keeps the message one line: a control character that a message quotes from its input (a key or a name
 * holding a newline) is written as an escape (\n, \t, \x01), cut where the line is full. */
static void escape_controls(void) {
    size_t n = strlen(error_line), i = 0;
    while (i < n && (unsigned char)error_line[i] >= 0x20 && error_line[i] != 0x7f) i++;
    if (i == n) return;
    char out[sizeof error_line];
    memcpy(out, error_line, i);
    size_t o = i;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)error_line[i];
        char esc[5];
        if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", c);
        else esc[0] = (char)c, esc[1] = 0;
        size_t l = strlen(esc);
        if (o + l >= sizeof out) break;
        memcpy(out + o, esc, l);
        o += l;
    }
    out[o] = 0;
    memcpy(error_line, out, o + 1);
}

int qlt_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_line, sizeof error_line, fmt, ap);
    va_end(ap);
    escape_controls();
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
    escape_controls();
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
