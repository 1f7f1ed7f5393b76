/* config_json.c: JSON text into the config tree (config_doc.h). cJSON parses and checks the syntax but
 * keeps no positions, so a small scanner walks the (already valid) text once and records where every value
 * starts, in document order; a pre-order walk of the cJSON tree meets the values in that same order.
 * Numbers are taken from the text itself, so a 64-bit seed keeps every digit. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config/config_doc.h"

typedef struct json_spot {
    size_t offset;   /* where the value starts */
    int64_t line;    /* its line */
    int64_t key_line; /* object members: the line of the key; else 0 */
} json_spot;

typedef struct json_scan {
    const char *s;
    size_t n, i;
    int64_t line;
    json_spot *spots;
    int64_t count, cap;
    int64_t nul_line; /* the first line with a string holding \u0000 (cJSON would cut the string there); 0 */
} json_scan;

/* Whitespace as cJSON skips it: every byte from 1 to 32 (not only the four JSON names), so that the scanner
 * and cJSON agree on where every value starts. */
static int is_space(char c) { return c > 0 && c <= 32; }

static void scan_space(json_scan *sc) {
    while (sc->i < sc->n && is_space(sc->s[sc->i])) {
        if (sc->s[sc->i] == '\n') sc->line++;
        sc->i++;
    }
}

static void scan_string(json_scan *sc) {
    sc->i++; /* opening quote */
    while (sc->i < sc->n && sc->s[sc->i] != '"') {
        if (sc->s[sc->i] == '\\' && !sc->nul_line && sc->n - sc->i >= 6 && memcmp(sc->s + sc->i + 1, "u0000", 5) == 0)
            sc->nul_line = sc->line;
        sc->i += sc->s[sc->i] == '\\' ? 2 : 1;
    }
    sc->i++; /* closing quote */
}

static void scan_value(json_scan *sc, int64_t key_line) {
    scan_space(sc);
    if (sc->count == sc->cap) {
        sc->cap = sc->cap ? 2 * sc->cap : 64;
        sc->spots = qlt_xrealloc(sc->spots, (size_t)sc->cap * sizeof *sc->spots);
    }
    sc->spots[sc->count++] = (json_spot){.offset = sc->i, .line = sc->line, .key_line = key_line};
    if (sc->i >= sc->n) return;
    char c = sc->s[sc->i];
    if (c == '"') {
        scan_string(sc);
    } else if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        sc->i++;
        for (;;) {
            scan_space(sc);
            if (sc->i >= sc->n || sc->s[sc->i] == close) break;
            int64_t member_line = 0;
            if (c == '{') {
                member_line = sc->line;
                scan_string(sc);
                scan_space(sc);
                sc->i++; /* ':' */
            }
            scan_value(sc, member_line);
            scan_space(sc);
            if (sc->i < sc->n && sc->s[sc->i] == ',') sc->i++;
        }
        sc->i++;
    } else {
        while (sc->i < sc->n && !strchr(",]}", sc->s[sc->i]) && !is_space(sc->s[sc->i])) sc->i++;
    }
}

typedef struct json_walk {
    const char *text;
    const json_spot *spots;
    int64_t count, next;
} json_walk;

static qlt_doc_node *convert(json_walk *w, const cJSON *j) {
    QLT_ASSERT(w->next < w->count);
    json_spot spot = w->spots[w->next++];
    qlt_doc_node *node;
    if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
        node = qlt_doc_new(cJSON_IsObject(j) ? QLT_DOC_MAP : QLT_DOC_LIST, spot.line, NULL);
        for (const cJSON *c = j->child; c; c = c->next) {
            qlt_doc_node *item = convert(w, c);
            if (cJSON_IsObject(j)) item->key = qlt_xstrdup(c->string ? c->string : "");
            qlt_doc_append(node, item);
        }
    } else if (cJSON_IsString(j)) {
        node = qlt_doc_new(QLT_DOC_SCALAR, spot.line, j->valuestring);
    } else if (cJSON_IsBool(j)) {
        node = qlt_doc_new(QLT_DOC_SCALAR, spot.line, cJSON_IsTrue(j) ? "true" : "false");
    } else if (cJSON_IsNumber(j)) {
        size_t len = strspn(w->text + spot.offset, "+-0123456789.eE");
        node = qlt_doc_new(QLT_DOC_SCALAR, spot.line, NULL);
        node->text = qlt_xmalloc(len + 1);
        memcpy(node->text, w->text + spot.offset, len);
        node->text[len] = '\0';
    } else {
        node = qlt_doc_new(QLT_DOC_NULL, spot.line, NULL);
    }
    node->key_line = spot.key_line;
    return node;
}

int qlt_doc_parse_json(const char *name, const char *text, size_t len, qlt_doc_node **root) {
    *root = NULL;
    const char *end = NULL;
    /* len + 1 takes in the terminating NUL, which cJSON wants to see when it checks for trailing text. */
    cJSON *j = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!j) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        /* cJSON stops just past the token it could not use; step back onto it. */
        while (at > 0 && at < len && strchr(" \t\r\n", text[at])) at--;
        int64_t line = qlt_doc_line_at(text, at);
        if (at >= len) return qlt_fail("%s:%lld: JSON syntax error: the text ends too early (a missing '}' or ']'?)",
                                       name, (long long)line);
        int shown = (int)strcspn(text + at, "\r\n");
        if (shown > 20) shown = 20;
        return qlt_fail("%s:%lld: JSON syntax error near '%.*s'", name, (long long)line, shown, text + at);
    }
    /* cJSON skips a UTF-8 byte order mark (editors on Windows write one); so does the scanner */
    size_t bom = len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
    json_scan sc = {.s = text, .n = len, .i = bom, .line = 1};
    scan_value(&sc, 0);
    if (sc.nul_line) {
        free(sc.spots);
        cJSON_Delete(j);
        return qlt_fail("%s:%lld: a string holds \\u0000 (a NUL character), which no key takes: remove it", name,
                        (long long)sc.nul_line);
    }
    json_walk w = {.text = text, .spots = sc.spots, .count = sc.count, .next = 0};
    *root = convert(&w, j);
    QLT_ASSERT(w.next == w.count);
    free(sc.spots);
    cJSON_Delete(j);
    return 0;
}
