/* jsonl.h: reads .jsonl and .jsonl.gz files line by line (zlib reads both: plain files pass through),
 * counting lines so every error can name file:line. Lines may be up to 256 MiB long. */
#ifndef QLT_JSONL_H
#define QLT_JSONL_H

#include <stddef.h>
#include <stdint.h>

typedef struct qlt_jsonl qlt_jsonl;

int qlt_jsonl_open(qlt_jsonl **out, const char *path);
/* The next line, without its "\n" / "\r\n"; valid until the next call. Returns 1 with a line, 0 at the
 * end of the file, -1 on a read or gzip error (recorded, naming the file and line). */
int qlt_jsonl_next(qlt_jsonl *r, const char **line, size_t *len);
/* 1-based number of the line last returned. */
int64_t qlt_jsonl_lineno(const qlt_jsonl *r);
const char *qlt_jsonl_path(const qlt_jsonl *r);
void qlt_jsonl_close(qlt_jsonl *r);

#endif
