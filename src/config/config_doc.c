/* config_doc.c: the format-neutral tree that config files are read into (see config_doc.h): nodes,
 * reading a file into memory, and the words error messages use to describe a value. */
#include "config/config_doc.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

qlt_doc_node *qlt_doc_new(qlt_doc_kind kind, int64_t line, const char *text) {
    qlt_doc_node *n = qlt_xcalloc(1, sizeof *n);
    n->kind = kind;
    n->line = line;
    if (text) n->text = qlt_xstrdup(text);
    return n;
}

void qlt_doc_append(qlt_doc_node *parent, qlt_doc_node *item) {
    QLT_ASSERT(parent->kind == QLT_DOC_LIST || parent->kind == QLT_DOC_MAP);
    parent->items = qlt_xrealloc(parent->items, (size_t)(parent->count + 1) * sizeof *parent->items);
    parent->items[parent->count++] = item;
}

void qlt_doc_free(qlt_doc_node *node) {
    if (!node) return;
    for (int64_t i = 0; i < node->count; i++) qlt_doc_free(node->items[i]);
    free(node->items);
    free(node->text);
    free(node->key);
    free(node);
}

qlt_doc_node *qlt_doc_split_commas(const qlt_doc_node *node) {
    if (node->kind != QLT_DOC_SCALAR) return NULL;
    qlt_doc_node *list = qlt_doc_new(QLT_DOC_LIST, node->line, NULL);
    const char *p = node->text;
    for (;;) {
        size_t n = strcspn(p, ",");
        const char *start = p, *end = p + n;
        while (start < end && isspace((unsigned char)*start)) start++;
        while (end > start && isspace((unsigned char)end[-1])) end--;
        qlt_doc_node *item = qlt_doc_new(QLT_DOC_SCALAR, node->line, NULL);
        item->text = qlt_xmalloc((size_t)(end - start) + 1);
        memcpy(item->text, start, (size_t)(end - start));
        item->text[end - start] = '\0';
        qlt_doc_append(list, item);
        if (!p[n]) break;
        p += n + 1;
    }
    return list;
}

const char *qlt_doc_describe(const qlt_doc_node *node, char *buf, size_t size) {
    switch (node->kind) {
    case QLT_DOC_NULL: snprintf(buf, size, "an empty value"); break;
    case QLT_DOC_LIST: snprintf(buf, size, "a list"); break;
    case QLT_DOC_MAP: snprintf(buf, size, "a mapping"); break;
    case QLT_DOC_SCALAR: snprintf(buf, size, "'%s'", node->text); break;
    }
    return buf;
}

int64_t qlt_doc_line_at(const char *text, size_t offset) {
    int64_t line = 1;
    for (size_t i = 0; i < offset && text[i]; i++)
        if (text[i] == '\n') line++;
    return line;
}

int qlt_doc_read_file(const char *path, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return qlt_fail("%s: cannot read the config file: %s (check the path)", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = qlt_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = qlt_xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int failed = ferror(f);
    int saved_errno = errno;
    fclose(f);
    if (failed) {
        free(buf);
        return qlt_fail("%s: cannot read the config file: %s", path, strerror(saved_errno));
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n)) {
        int64_t line = qlt_doc_line_at(buf, n);
        free(buf);
        return qlt_fail("%s:%lld: the config file holds a NUL byte; save it as plain UTF-8 text", path,
                        (long long)line);
    }
    *text = buf;
    *len = n;
    return 0;
}
