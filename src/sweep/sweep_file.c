/* sweep_file.c: the sweep file (YAML or JSON) read with the config's own tree reader, so that every error
 * names the file and line: `base`, `output: {dir}`, `grid: {key: [values]}` and
 * `random: {n, seed, keys: {key: [values] | {uniform: [lo, hi]} | {loguniform: [lo, hi]}}}`. Keys are checked
 * against the run config's schema (with its did-you-mean hint); their values are left to the runs. */
#include "sweep/sweep.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/edit_distance.h"
#include "common/error.h"
#include "config/config.h"
#include "config/config_doc.h"

static const char *const top_keys[] = {"base", "output", "grid", "random"};
static const char *const random_keys[] = {"n", "seed", "keys"};

/* " (did you mean 'x'?)" for the closest of names, or the list of them. */
static void suggest(const char *name, const char *const *names, int count, char *buf, size_t size) {
    int best = -1;
    int64_t best_d = 3;
    for (int i = 0; i < count; i++) {
        int64_t d = qlt_edit_distance(name, names[i]);
        if (d < best_d) best_d = d, best = i;
    }
    if (best >= 0) {
        snprintf(buf, size, " (did you mean '%s'?)", names[best]);
        return;
    }
    size_t n = (size_t)snprintf(buf, size, " (valid: ");
    for (int i = 0; i < count && n < size; i++) n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", names[i]);
    if (n < size) snprintf(buf + n, size - n, ")");
}

static int check_keys(const char *file, const qlt_doc_node *map, const char *what, const char *const *names, int count) {
    for (int64_t i = 0; i < map->count; i++) {
        const qlt_doc_node *item = map->items[i];
        int known = 0;
        for (int k = 0; k < count; k++) known |= !strcmp(item->key, names[k]);
        if (!known) {
            char hint[256];
            suggest(item->key, names, count, hint, sizeof hint);
            return qlt_fail("%s:%lld: unknown key '%s' in %s%s", file, (long long)item->key_line, item->key, what, hint);
        }
        for (int64_t k = 0; k < i; k++)
            if (!strcmp(map->items[k]->key, item->key))
                return qlt_fail("%s:%lld: duplicate key '%s' in %s (first at line %lld); keep one", file,
                                (long long)item->key_line, item->key, what, (long long)map->items[k]->key_line);
    }
    return 0;
}

static const qlt_doc_node *member(const qlt_doc_node *map, const char *key) {
    for (int64_t i = 0; i < map->count; i++)
        if (!strcmp(map->items[i]->key, key)) return map->items[i];
    return NULL;
}

static int expect_map(const char *file, const qlt_doc_node *node, const char *what, const char *example) {
    if (node->kind == QLT_DOC_MAP) return 0;
    char desc[128];
    return qlt_fail("%s:%lld: %s must be a mapping (%s), got %s", file, (long long)node->line, what, example,
                    qlt_doc_describe(node, desc, sizeof desc));
}

/* Drops "./" parts and folds "name/.." away, in place (configs/../runs/x -> runs/x); leading ".." stay. */
static void tidy_path(char *path) {
    char *parts[256], *save = NULL;
    size_t len = strlen(path);
    int n = 0, absolute = path[0] == '/';
    for (char *tok = strtok_r(path, "/", &save); tok && n < 256; tok = strtok_r(NULL, "/", &save)) {
        if (!strcmp(tok, ".")) continue;
        if (!strcmp(tok, "..") && n > 0 && strcmp(parts[n - 1], "..") != 0) n--;
        else parts[n++] = tok;
    }
    char *out = qlt_xmalloc(len + 2), *w = out; /* never longer than path; parts point into path */
    if (absolute) *w++ = '/';
    for (int i = 0; i < n; i++) w += sprintf(w, "%s%s", i ? "/" : "", parts[i]);
    if (w == out) *w++ = '.';
    *w = '\0';
    strcpy(path, out);
    free(out);
}

/* A path of the sweep file: absolute as it is, else relative to the sweep file's directory. */
static char *resolve(const char *sweep_path, const char *p) {
    const char *slash = strrchr(sweep_path, '/');
    if (p[0] == '/' || !slash) return qlt_xstrdup(p);
    size_t dir = (size_t)(slash - sweep_path), n = strlen(p);
    char *out = qlt_xmalloc(dir + n + 3);
    memcpy(out, sweep_path, dir);
    out[dir] = '/';
    memcpy(out + dir + 1, p, n + 1);
    tidy_path(out);
    return out;
}

static int string_value(const char *file, const qlt_doc_node *node, const char *what, char **out) {
    if (node->kind != QLT_DOC_SCALAR || !node->text[0]) {
        char desc[128];
        return qlt_fail("%s:%lld: %s must be a path, got %s", file, (long long)node->line, what,
                        qlt_doc_describe(node, desc, sizeof desc));
    }
    *out = resolve(file, node->text);
    return 0;
}

static int number_value(const char *file, const qlt_doc_node *node, const char *what, double *out) {
    if (node->kind == QLT_DOC_SCALAR) {
        char *end;
        errno = 0;
        double v = strtod(node->text, &end);
        if (end != node->text && !*end && errno == 0 && isfinite(v)) {
            *out = v;
            return 0;
        }
    }
    char desc[128];
    return qlt_fail("%s:%lld: %s must be a number, got %s", file, (long long)node->line, what,
                    qlt_doc_describe(node, desc, sizeof desc));
}

/* The schema entry of a varied key: known, not one the sweep sets itself. */
static int check_config_key(const char *file, const qlt_doc_node *item, int *integer, int *numeric) {
    const char *key = item->key;
    if (!strcmp(key, "output.dir") || !strcmp(key, "data.cache_dir"))
        return qlt_fail("%s:%lld: '%s' is set by the sweep for each run (<output.dir>/<run name>, "
                        "<output.dir>/cache); vary another key", file, (long long)item->key_line, key);
    for (int64_t i = 0; i < qlt_config_key_count(); i++) {
        const qlt_config_key *k = qlt_config_key_at(i);
        if (strcmp(k->name, key) != 0) continue;
        *integer = !strcmp(k->type, "int") || !strcmp(k->type, "int64") || !strcmp(k->type, "uint64");
        *numeric = *integer || !strcmp(k->type, "float");
        return 0;
    }
    char hint[512];
    qlt_config_suggest_key(key, hint, sizeof hint);
    return qlt_fail("%s:%lld: unknown key '%s'%s", file, (long long)item->key_line, key, hint);
}

/* One list item as the text `--set key=TEXT` reads: a scalar as written, a flat list as "[a, b]". */
static int value_text(const char *file, const char *key, const qlt_doc_node *v, char **out) {
    if (v->kind == QLT_DOC_SCALAR) {
        *out = qlt_xstrdup(v->text);
        return 0;
    }
    if (v->kind == QLT_DOC_LIST) {
        size_t len = 3;
        for (int64_t i = 0; i < v->count; i++) {
            if (v->items[i]->kind != QLT_DOC_SCALAR)
                return qlt_fail("%s:%lld: a value of '%s' is a list holding %s: only lists of plain values work", file,
                                (long long)v->line, key, v->items[i]->kind == QLT_DOC_MAP ? "a mapping" : "a list");
            len += strlen(v->items[i]->text) + 2;
        }
        char *s = qlt_xmalloc(len);
        size_t n = 0;
        s[n++] = '[';
        for (int64_t i = 0; i < v->count; i++) n += (size_t)sprintf(s + n, "%s%s", i ? ", " : "", v->items[i]->text);
        s[n++] = ']';
        s[n] = '\0';
        *out = s;
        return 0;
    }
    char desc[128];
    return qlt_fail("%s:%lld: a value of '%s' must be a plain value or a list, got %s", file, (long long)v->line, key,
                    qlt_doc_describe(v, desc, sizeof desc));
}

static int list_axis(const char *file, const qlt_doc_node *item, qlt_sweep_axis *a) {
    if (item->kind != QLT_DOC_LIST || item->count == 0) {
        char desc[128];
        return qlt_fail("%s:%lld: '%s' must be a non-empty list of values (e.g. %s: [1.0e-4, 2.0e-4]), got %s", file,
                        (long long)item->line, item->key, item->key, qlt_doc_describe(item, desc, sizeof desc));
    }
    a->dist = QLT_SWEEP_LIST;
    a->values = qlt_xcalloc((size_t)item->count, sizeof *a->values);
    for (int64_t i = 0; i < item->count; i++) {
        QLT_TRY(value_text(file, item->key, item->items[i], &a->values[i]));
        a->n_values++;
    }
    return 0;
}

/* {uniform: [lo, hi]} or {loguniform: [lo, hi]} */
static int range_axis(const char *file, const qlt_doc_node *item, int numeric, qlt_sweep_axis *a) {
    const char *const kinds[] = {"uniform", "loguniform"};
    QLT_TRY(check_keys(file, item, item->key, kinds, 2));
    if (item->count != 1)
        return qlt_fail("%s:%lld: '%s' needs one of uniform: [lo, hi] or loguniform: [lo, hi]", file,
                        (long long)item->line, item->key);
    const qlt_doc_node *r = item->items[0];
    a->dist = !strcmp(r->key, "uniform") ? QLT_SWEEP_UNIFORM : QLT_SWEEP_LOGUNIFORM;
    if (!numeric)
        return qlt_fail("%s:%lld: '%s' is not a number key: give it a list of values instead of a %s range", file,
                        (long long)r->key_line, item->key, r->key);
    if (r->kind != QLT_DOC_LIST || r->count != 2)
        return qlt_fail("%s:%lld: %s of '%s' must be a list [lo, hi]", file, (long long)r->line, r->key, item->key);
    char what[160];
    snprintf(what, sizeof what, "the bounds of '%s'", item->key);
    QLT_TRY(number_value(file, r->items[0], what, &a->lo));
    QLT_TRY(number_value(file, r->items[1], what, &a->hi));
    if (a->lo > a->hi)
        return qlt_fail("%s:%lld: %s of '%s': lo %g is above hi %g; write [lo, hi]", file, (long long)r->line, r->key,
                        item->key, a->lo, a->hi);
    if (a->dist == QLT_SWEEP_LOGUNIFORM && a->lo <= 0)
        return qlt_fail("%s:%lld: loguniform of '%s' needs lo > 0, got %g; use uniform for ranges reaching 0 or below",
                        file, (long long)r->line, item->key, a->lo);
    if (a->integer && ceil(a->lo) > floor(a->hi))
        return qlt_fail("%s:%lld: %s of '%s' (an integer key) holds no integer: widen [%g, %g]", file,
                        (long long)r->line, r->key, item->key, a->lo, a->hi);
    return 0;
}

/* The axes of a `grid` or `random.keys` mapping; ranges only where allow_ranges. */
static int read_axes(qlt_sweep *sw, const qlt_doc_node *map, const char *what, int allow_ranges,
                     qlt_sweep_axis **axes, int *n_axes) {
    const char *file = sw->path;
    QLT_TRY(expect_map(file, map, what, "key: [values]"));
    if (map->count == 0) return qlt_fail("%s:%lld: %s names no keys", file, (long long)map->line, what);
    *axes = qlt_xcalloc((size_t)map->count, sizeof **axes);
    for (int64_t i = 0; i < map->count; i++) {
        const qlt_doc_node *item = map->items[i];
        for (int64_t k = 0; k < i; k++)
            if (!strcmp(map->items[k]->key, item->key))
                return qlt_fail("%s:%lld: duplicate key '%s' in %s (first at line %lld); keep one", file,
                                (long long)item->key_line, item->key, what, (long long)map->items[k]->key_line);
        for (int g = 0; g < sw->n_grid && axes != &sw->grid; g++)
            if (!strcmp(sw->grid[g].key, item->key))
                return qlt_fail("%s:%lld: '%s' is in both grid (line %lld) and random: vary it in one of them", file,
                                (long long)item->key_line, item->key, (long long)sw->grid[g].line);
        int numeric = 0;
        qlt_sweep_axis *a = &(*axes)[i];
        a->key = qlt_xstrdup(item->key);
        a->line = item->key_line;
        (*n_axes)++;
        QLT_TRY(check_config_key(file, item, &a->integer, &numeric));
        if (item->kind == QLT_DOC_MAP && allow_ranges) QLT_TRY(range_axis(file, item, numeric, a));
        else QLT_TRY(list_axis(file, item, a));
    }
    return 0;
}

static int read_random(qlt_sweep *sw, const qlt_doc_node *node) {
    const char *file = sw->path;
    QLT_TRY(expect_map(file, node, "random", "n: 8, seed: 0, keys: {...}"));
    QLT_TRY(check_keys(file, node, "random", random_keys, 3));
    const qlt_doc_node *n = member(node, "n"), *seed = member(node, "seed"), *keys = member(node, "keys");
    if (!n || !keys)
        return qlt_fail("%s:%lld: random needs n (the number of draws) and keys (what to draw)", file,
                        (long long)node->line);
    double v;
    QLT_TRY(number_value(file, n, "random.n", &v));
    if (v < 1 || v > 100000 || v != floor(v))
        return qlt_fail("%s:%lld: random.n must be a whole number in [1, 100000], got %s", file, (long long)n->line,
                        n->text);
    sw->random_count = (int64_t)v;
    if (seed) {
        QLT_TRY(number_value(file, seed, "random.seed", &v));
        if (v < 0 || v != floor(v) || v > 9007199254740992.0)
            return qlt_fail("%s:%lld: random.seed must be a whole number >= 0, got %s", file, (long long)seed->line,
                            seed->text);
        sw->random_seed = (uint64_t)v;
    }
    return read_axes(sw, keys, "random.keys", 1, &sw->random, &sw->n_random);
}

static int read_document(qlt_sweep *sw, const qlt_doc_node *root) {
    const char *file = sw->path;
    QLT_TRY(expect_map(file, root, "the top level", "base, output, grid, random"));
    QLT_TRY(check_keys(file, root, "the sweep file", top_keys, 4));
    const qlt_doc_node *base = member(root, "base"), *output = member(root, "output");
    const qlt_doc_node *grid = member(root, "grid"), *random = member(root, "random");
    if (!base) return qlt_fail("%s: no 'base': name the run config every run starts from (base: configs/x.yaml)", file);
    if (!output) return qlt_fail("%s: no 'output': name the sweep's directory (output: {dir: runs/my-sweep})", file);
    if (!grid && !random) return qlt_fail("%s: nothing to vary: add grid: {key: [values]} or random: {...}", file);
    QLT_TRY(string_value(file, base, "base", &sw->base));
    QLT_TRY(expect_map(file, output, "output", "dir: runs/my-sweep"));
    const char *const output_keys[] = {"dir"};
    QLT_TRY(check_keys(file, output, "output", output_keys, 1));
    const qlt_doc_node *dir = member(output, "dir");
    if (!dir) return qlt_fail("%s:%lld: output needs dir (output: {dir: runs/my-sweep})", file, (long long)output->line);
    QLT_TRY(string_value(file, dir, "output.dir", &sw->out_dir));
    if (grid) QLT_TRY(read_axes(sw, grid, "grid", 0, &sw->grid, &sw->n_grid));
    if (random) QLT_TRY(read_random(sw, random));
    return 0;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

int qlt_sweep_load(qlt_sweep *sw, const char *path) {
    memset(sw, 0, sizeof *sw);
    sw->path = qlt_xstrdup(path);
    int (*parse)(const char *, const char *, size_t, qlt_doc_node **);
    if (has_suffix(path, ".yaml") || has_suffix(path, ".yml")) parse = qlt_doc_parse_yaml;
    else if (has_suffix(path, ".json")) parse = qlt_doc_parse_json;
    else return qlt_fail("%s: unknown sweep file format; name it *.yaml, *.yml or *.json", path);
    char *text;
    size_t len;
    QLT_TRY(qlt_doc_read_file(path, &text, &len));
    qlt_doc_node *root = NULL;
    int rc = parse(path, text, len, &root);
    free(text);
    if (rc == 0) rc = read_document(sw, root);
    qlt_doc_free(root);
    if (rc == 0) rc = qlt_sweep_expand(sw);
    return rc;
}

static void free_axes(qlt_sweep_axis *axes, int n) {
    for (int i = 0; i < n; i++) {
        free(axes[i].key);
        for (int k = 0; k < axes[i].n_values; k++) free(axes[i].values[k]);
        free(axes[i].values);
    }
    free(axes);
}

void qlt_sweep_free(qlt_sweep *sw) {
    for (int i = 0; i < sw->n_runs; i++) {
        qlt_sweep_run *r = &sw->runs[i];
        free(r->name);
        free(r->dir);
        for (int k = 0; k < r->n_set; k++) free(r->values[k]);
        free(r->values);
        free(r->keys);
    }
    free(sw->runs);
    free(sw->columns);
    free_axes(sw->grid, sw->n_grid);
    free_axes(sw->random, sw->n_random);
    free(sw->path);
    free(sw->base);
    free(sw->out_dir);
    memset(sw, 0, sizeof *sw);
}
