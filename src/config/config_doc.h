/* config_doc.h: a configuration file (YAML or JSON) read into one small tree that remembers the line of
 * every key and value, so that config.c checks both formats with one piece of code and every error can
 * name "file:line". Private to src/config/config*.c, and read by src/sweep for sweep files. */
#ifndef QLT_CONFIG_DOC_H
#define QLT_CONFIG_DOC_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    QLT_DOC_NULL,   /* YAML `key:`, `~`, `null`; JSON null */
    QLT_DOC_SCALAR, /* any other scalar, kept as its text (numbers are not interpreted here) */
    QLT_DOC_LIST,
    QLT_DOC_MAP,
} qlt_doc_kind;

typedef struct qlt_doc_node {
    qlt_doc_kind kind;
    int64_t line;                 /* 1-based line where the value starts; 0 = unknown */
    char *text;                   /* SCALAR: the text (JSON strings unescaped); NULL otherwise */
    char *key;                    /* a MAP's item: its key; NULL otherwise */
    int64_t key_line;             /* a MAP's item: the key's line */
    int64_t count;                /* LIST / MAP: number of items */
    struct qlt_doc_node **items;  /* LIST / MAP: the items, in file order */
} qlt_doc_node;

/* Reads a whole file into a NUL-terminated buffer (*len excludes the NUL). Fails with
 * "<path>: cannot read the config file: <reason>" or when the file holds a NUL byte. */
int qlt_doc_read_file(const char *path, char **text, size_t *len);

/* Parses YAML text (the first document; a second one is an error). `name` prefixes errors ("x.yaml:5: ...").
 * An empty document gives a QLT_DOC_NULL root. */
int qlt_doc_parse_yaml(const char *name, const char *text, size_t len, qlt_doc_node **root);
/* Parses JSON text with cJSON; lines are recovered from byte offsets. */
int qlt_doc_parse_json(const char *name, const char *text, size_t len, qlt_doc_node **root);

/* Node construction and release (used by the parsers and by config.c for `--set` values). */
qlt_doc_node *qlt_doc_new(qlt_doc_kind kind, int64_t line, const char *text);
void qlt_doc_append(qlt_doc_node *parent, qlt_doc_node *item);
void qlt_doc_free(qlt_doc_node *node);

/* A scalar "a, b,c" as a LIST of its trimmed comma-separated parts (same line); NULL when node is not a
 * scalar. The caller frees the result. */
qlt_doc_node *qlt_doc_split_commas(const qlt_doc_node *node);

/* "'text'", "a list", "a mapping" or "an empty value", for "got ..." in error messages. The result is
 * written into buf (truncated to size) and returned. */
const char *qlt_doc_describe(const qlt_doc_node *node, char *buf, size_t size);

/* 1-based line of byte `offset` in text. */
int64_t qlt_doc_line_at(const char *text, size_t offset);

#endif
