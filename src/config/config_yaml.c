/* config_yaml.c: YAML text into the config tree (config_doc.h) with libyaml's document API, which resolves
 * anchors and aliases and keeps the line of every node. Scalars stay text: libyaml does not guess types,
 * so `no` stays the string "no" until the schema asks for a bool. */
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "common/error.h"
#include "config/config_doc.h"

/* Limits that stop an alias bomb ("billion laughs") from expanding into millions of nodes. */
#define YAML_MAX_DEPTH 32
#define YAML_MAX_NODES 100000

typedef struct yaml_walk {
    const char *name;
    yaml_document_t *doc;
    int64_t nodes; /* nodes made so far */
} yaml_walk;

static int yaml_failure(const char *name, const char *text, size_t len, const yaml_parser_t *p) {
    if (p->error == YAML_MEMORY_ERROR) return qlt_fail("%s: out of memory while parsing YAML", name);
    if (p->error == YAML_READER_ERROR)
        return qlt_fail("%s:%lld: cannot read the YAML text: %s (save the file as UTF-8)", name,
                        (long long)qlt_doc_line_at(text, p->problem_offset), p->problem ? p->problem : "?");
    const char *problem = p->problem ? p->problem : "invalid YAML";
    long long line = (long long)p->problem_mark.line + 1;
    /* The most common cause by far gets named. */
    const char *hint = p->problem_mark.index < len && text[p->problem_mark.index] == '\t'
                           ? "; YAML indents with spaces, not tabs" : "";
    if (p->context)
        return qlt_fail("%s:%lld: YAML syntax error: %s (%s at line %lld)%s", name, line, problem, p->context,
                        (long long)p->context_mark.line + 1, hint);
    return qlt_fail("%s:%lld: YAML syntax error: %s%s", name, line, problem, hint);
}

static int is_null_scalar(const yaml_node_t *n) {
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *s = (const char *)n->data.scalar.value;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static int convert(yaml_walk *w, const yaml_node_t *n, int depth, qlt_doc_node **out);

static int convert_pairs(yaml_walk *w, const yaml_node_t *n, int depth, qlt_doc_node *map) {
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        QLT_ASSERT(k && v);
        if (k->type != YAML_SCALAR_NODE)
            return qlt_fail("%s:%lld: a key must be a plain name, not a list or mapping", w->name,
                            (long long)k->start_mark.line + 1);
        qlt_doc_node *item;
        QLT_TRY(convert(w, v, depth + 1, &item));
        item->key = qlt_xstrdup((const char *)k->data.scalar.value);
        item->key_line = (int64_t)k->start_mark.line + 1;
        qlt_doc_append(map, item);
    }
    return 0;
}

/* On failure *out holds nothing; the caller frees only what it already appended. */
static int convert(yaml_walk *w, const yaml_node_t *n, int depth, qlt_doc_node **out) {
    *out = NULL;
    int64_t line = (int64_t)n->start_mark.line + 1;
    if (depth > YAML_MAX_DEPTH || ++w->nodes > YAML_MAX_NODES)
        return qlt_fail("%s:%lld: the YAML nests or repeats (through aliases) far deeper than a config needs",
                        w->name, (long long)line);
    if (n->type == YAML_SCALAR_NODE) {
        if (is_null_scalar(n)) *out = qlt_doc_new(QLT_DOC_NULL, line, NULL);
        else *out = qlt_doc_new(QLT_DOC_SCALAR, line, (const char *)n->data.scalar.value);
        return 0;
    }
    qlt_doc_node *node = qlt_doc_new(n->type == YAML_SEQUENCE_NODE ? QLT_DOC_LIST : QLT_DOC_MAP, line, NULL);
    int rc = 0;
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = n->data.sequence.items.start; rc == 0 && it < n->data.sequence.items.top;
             it++) {
            qlt_doc_node *item;
            rc = convert(w, yaml_document_get_node(w->doc, *it), depth + 1, &item);
            if (rc == 0) qlt_doc_append(node, item);
        }
    } else {
        rc = convert_pairs(w, n, depth, node);
    }
    if (rc != 0) {
        qlt_doc_free(node);
        return -1;
    }
    *out = node;
    return 0;
}

int qlt_doc_parse_yaml(const char *name, const char *text, size_t len, qlt_doc_node **root) {
    *root = NULL;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return qlt_fail("%s: out of memory while parsing YAML", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_failure(name, text, len, &parser);
        yaml_parser_delete(&parser);
        return -1;
    }
    int rc = 0;
    const yaml_node_t *top = yaml_document_get_root_node(&doc);
    if (!top) {
        *root = qlt_doc_new(QLT_DOC_NULL, 1, NULL);
    } else {
        yaml_walk w = {.name = name, .doc = &doc, .nodes = 0};
        rc = convert(&w, top, 0, root);
    }
    yaml_document_delete(&doc);
    if (rc == 0) {
        /* A second document would be silently ignored by most readers; say so instead. */
        yaml_document_t second;
        if (!yaml_parser_load(&parser, &second)) {
            rc = yaml_failure(name, text, len, &parser);
        } else {
            const yaml_node_t *extra = yaml_document_get_root_node(&second);
            if (extra)
                rc = qlt_fail("%s:%lld: a second YAML document starts here; keep one document per config file",
                              name, (long long)extra->start_mark.line + 1);
            yaml_document_delete(&second);
        }
    }
    yaml_parser_delete(&parser);
    if (rc != 0) {
        qlt_doc_free(*root);
        *root = NULL;
    }
    return rc;
}
