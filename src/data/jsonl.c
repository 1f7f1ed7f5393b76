/* jsonl.c: see jsonl.h. One growing buffer; gzread fills it in 1 MiB steps; a line is found with
 * memchr and handed out in place. */
#include "data/jsonl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/error.h"
#include "common/fileutil.h"

enum { READ_STEP = 1 << 20 };
/* The longest line read: one example is far shorter, and without a bound a file with no newline (or a small
 * .gz that inflates to gigabytes) would be buffered whole before any error. */
#define MAX_LINE_BYTES ((size_t)256 << 20)

struct qlt_jsonl {
    gzFile gz;
    char *path;
    char *buf;
    size_t cap, start, end; /* unread bytes are buf[start, end) */
    int eof;
    int64_t lineno;
};

int qlt_jsonl_open(qlt_jsonl **out, const char *path) {
    *out = NULL;
    QLT_TRY(qlt_check_not_dir(path));
    gzFile gz = gzopen(path, "rb");
    if (!gz) return qlt_fail("%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
    gzbuffer(gz, 1 << 17);
    qlt_jsonl *r = qlt_xcalloc(1, sizeof *r);
    r->gz = gz;
    r->path = qlt_xstrdup(path);
    r->cap = 2 * READ_STEP;
    r->buf = qlt_xmalloc(r->cap);
    *out = r;
    return 0;
}

static int fill(qlt_jsonl *r) {
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->cap - r->end < READ_STEP) r->buf = qlt_xrealloc(r->buf, r->cap *= 2);
    int got = gzread(r->gz, r->buf + r->end, READ_STEP);
    if (got < 0) {
        int code;
        const char *msg = gzerror(r->gz, &code);
        return qlt_fail("%s: line %lld: read error (%s): the file is corrupt or truncated", r->path,
                        (long long)r->lineno + 1, msg);
    }
    if (got == 0) {
        int code;
        const char *msg = gzerror(r->gz, &code);
        if (code != Z_OK && code != Z_STREAM_END)
            return qlt_fail("%s: line %lld: gzip error (%s): the file is corrupt or truncated", r->path,
                            (long long)r->lineno + 1, msg);
        r->eof = 1;
    }
    r->end += (size_t)got;
    return 0;
}

int qlt_jsonl_next(qlt_jsonl *r, const char **line, size_t *len) {
    size_t scanned = r->start;
    for (;;) {
        char *nl = memchr(r->buf + scanned, '\n', r->end - scanned);
        if (nl || (r->eof && r->end > r->start)) {
            size_t stop = nl ? (size_t)(nl - r->buf) : r->end;
            *line = r->buf + r->start;
            *len = stop - r->start;
            if (*len > 0 && (*line)[*len - 1] == '\r') (*len)--;
            r->start = nl ? stop + 1 : stop;
            r->lineno++;
            return 1;
        }
        if (r->eof) return 0;
        if (r->end - r->start > MAX_LINE_BYTES)
            return qlt_fail("%s: line %lld is longer than %zu MiB (no newline found): not a JSON Lines file, or "
                            "one example a line was not written", r->path, (long long)r->lineno + 1,
                            MAX_LINE_BYTES >> 20);
        size_t offset = scanned - r->start;
        QLT_TRY(fill(r));
        scanned = r->start + offset;
    }
}

int64_t qlt_jsonl_lineno(const qlt_jsonl *r) { return r->lineno; }
const char *qlt_jsonl_path(const qlt_jsonl *r) { return r->path; }

void qlt_jsonl_close(qlt_jsonl *r) {
    if (!r) return;
    gzclose(r->gz);
    free(r->path);
    free(r->buf);
    free(r);
}
