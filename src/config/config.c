/* config.c: the run configuration's life: defaults, then a YAML or JSON file, then `--set` overrides,
 * then validation, then the effective config written as JSON beside the run. The keys themselves live in
 * config_schema.c; files become a config_doc tree first, so YAML and JSON share every check below.
 * Loading and overriding work on a copy and only replace the caller's struct when everything succeeded. */
#include "config/config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "config/config_doc.h"
#include "config/config_schema.h"

/* ---- applying values ------------------------------------------------------------------------------- */

/* Parses an override value the way a YAML scalar or flow list is parsed; text that is not valid YAML
 * (or that YAML reads as a mapping, like "a: b") stays the plain string it was typed as. */
static qlt_doc_node *parse_value_text(const char *text) {
    qlt_doc_node *node = NULL;
    if (qlt_doc_parse_yaml("--set", text, strlen(text), &node) != 0 || node->kind == QLT_DOC_MAP) {
        qlt_error_clear();
        qlt_doc_free(node);
        node = qlt_doc_new(QLT_DOC_SCALAR, 0, text);
    }
    return node;
}

static int apply_text(qlt_config *cfg, const qlt_cfg_entry *e, const char *text, const qlt_cfg_where *where) {
    qlt_doc_node *node = parse_value_text(text);
    /* On the command line a list of paths may also be written a.jsonl,b.jsonl (in files, a single string
     * is one path, commas included). */
    if (e->type == QLT_CFG_PATHS && node->kind == QLT_DOC_SCALAR && strchr(node->text, ',')) {
        qlt_doc_node *list = qlt_doc_split_commas(node);
        qlt_doc_free(node);
        node = list;
    }
    int rc = qlt_cfg_apply(cfg, e, node, where);
    qlt_doc_free(node);
    return rc;
}

/* Keeps `work` in *cfg when rc == 0, else drops it and leaves *cfg untouched. */
static int commit(qlt_config *cfg, qlt_config *work, int rc) {
    if (rc == 0) {
        qlt_config_free(cfg);
        *cfg = *work;
    } else {
        qlt_config_free(work);
    }
    return rc;
}

void qlt_config_defaults(qlt_config *cfg) {
    memset(cfg, 0, sizeof *cfg); /* every origin QLT_ORIGIN_DEFAULT */
    QLT_ASSERT(qlt_cfg_count() <= QLT_CONFIG_MAX_KEYS);
    for (int64_t i = 0; i < qlt_cfg_count(); i++) {
        const qlt_cfg_entry *e = qlt_cfg_at(i);
        qlt_cfg_where where = {.file = NULL, .assignment = e->info.default_text};
        int rc = apply_text(cfg, e, e->info.default_text, &where);
        QLT_ASSERT(rc == 0);
    }
}

int qlt_config_set(qlt_config *cfg, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq) return qlt_fail("--set %s: expected section.key=value (e.g. --set train.lr=1e-4)", assignment);
    const char *start = assignment, *end = eq;
    while (start < end && (*start == ' ' || *start == '\t')) start++;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t')) end--;
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(end - start), start);
    const qlt_cfg_entry *e = qlt_cfg_find(name);
    if (!e) {
        char hint[512];
        qlt_cfg_suggest_key(name, hint, sizeof hint);
        return qlt_fail("--set %s: unknown key '%s'%s", assignment, name, hint);
    }
    qlt_config work;
    qlt_config_copy(&work, cfg);
    qlt_cfg_where where = {.file = NULL, .assignment = assignment};
    work.origin[e - qlt_cfg_at(0)] = (qlt_config_origin){QLT_ORIGIN_SET, 0};
    return commit(cfg, &work, apply_text(&work, e, eq + 1, &where));
}

/* ---- files ------------------------------------------------------------------------------------------ */

/* The earlier item of `map` with the same key as items[i], or NULL. */
static const qlt_doc_node *earlier_key(const qlt_doc_node *map, int64_t i) {
    for (int64_t k = 0; k < i; k++)
        if (!strcmp(map->items[k]->key, map->items[i]->key)) return map->items[k];
    return NULL;
}

static int apply_section(qlt_config *cfg, const char *file, const qlt_doc_node *section) {
    if (section->kind == QLT_DOC_NULL) return 0; /* `train:` with nothing under it */
    if (section->kind != QLT_DOC_MAP) {
        char desc[256];
        return qlt_fail("%s:%lld: section '%s' must be a mapping of key: value lines, got %s", file,
                        (long long)section->line, section->key, qlt_doc_describe(section, desc, sizeof desc));
    }
    for (int64_t i = 0; i < section->count; i++) {
        const qlt_doc_node *item = section->items[i];
        char name[256];
        snprintf(name, sizeof name, "%s.%s", section->key, item->key);
        const qlt_doc_node *first = earlier_key(section, i);
        if (first)
            return qlt_fail("%s:%lld: duplicate key '%s' (first set at line %lld); keep one", file,
                            (long long)item->key_line, name, (long long)first->key_line);
        const qlt_cfg_entry *e = qlt_cfg_find(name);
        if (!e) {
            char hint[512];
            qlt_cfg_suggest_key(name, hint, sizeof hint);
            return qlt_fail("%s:%lld: unknown key '%s'%s", file, (long long)item->key_line, name, hint);
        }
        qlt_cfg_where where = {.file = file, .assignment = NULL};
        QLT_TRY(qlt_cfg_apply(cfg, e, item, &where));
        cfg->origin[e - qlt_cfg_at(0)] = (qlt_config_origin){QLT_ORIGIN_FILE, (int)item->key_line};
    }
    return 0;
}

static int apply_document(qlt_config *cfg, const char *file, const qlt_doc_node *root) {
    if (root->kind == QLT_DOC_NULL) return 0; /* an empty file changes nothing */
    if (root->kind != QLT_DOC_MAP) {
        char desc[256];
        return qlt_fail("%s:%lld: the top level must be a mapping of sections (model, lora, data, train, "
                        "output), got %s", file, (long long)root->line, qlt_doc_describe(root, desc, sizeof desc));
    }
    for (int64_t i = 0; i < root->count; i++) {
        const qlt_doc_node *section = root->items[i];
        const qlt_doc_node *first = earlier_key(root, i);
        if (first)
            return qlt_fail("%s:%lld: duplicate section '%s' (first at line %lld); merge them into one", file,
                            (long long)section->key_line, section->key, (long long)first->key_line);
        if (!qlt_cfg_is_section(section->key)) {
            char hint[512];
            qlt_cfg_suggest_section(section->key, hint, sizeof hint);
            return qlt_fail("%s:%lld: unknown section '%s'%s", file, (long long)section->key_line, section->key,
                            hint);
        }
        QLT_TRY(apply_section(cfg, file, section));
    }
    return 0;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

int qlt_config_load_file(qlt_config *cfg, const char *path) {
    int (*parse)(const char *, const char *, size_t, qlt_doc_node **);
    if (has_suffix(path, ".yaml") || has_suffix(path, ".yml")) parse = qlt_doc_parse_yaml;
    else if (has_suffix(path, ".json")) parse = qlt_doc_parse_json;
    else return qlt_fail("%s: unknown config format; name the file *.yaml, *.yml or *.json", path);
    char *text;
    size_t len;
    QLT_TRY(qlt_doc_read_file(path, &text, &len));
    qlt_doc_node *root;
    int rc = parse(path, text, len, &root);
    free(text);
    if (rc != 0) return -1;
    qlt_config work;
    qlt_config_copy(&work, cfg);
    rc = apply_document(&work, path, root);
    qlt_doc_free(root);
    return commit(cfg, &work, rc);
}

/* ---- validation ------------------------------------------------------------------------------------- */

/* "key = value: <rule> (e.g. --set key=<default>)", one line. */
static int invalid(const qlt_config *cfg, const qlt_cfg_entry *e, int index, const char *rule) {
    char value[64];
    qlt_cfg_format_number(cfg, e, index, value, sizeof value);
    if (e->type == QLT_CFG_FLOAT_PAIR)
        return qlt_fail("%s[%d] = %s: %s (e.g. --set '%s=%s')", e->info.name, index, value, rule, e->info.name,
                        e->info.default_text);
    return qlt_fail("%s = %s: %s (e.g. --set %s=%s)", e->info.name, value, rule, e->info.name,
                    e->info.default_text);
}

/* What every key checks by itself: enum values, bools, ranges, path lists, targets. */
static int validate_key(const qlt_config *cfg, const qlt_cfg_entry *e) {
    const void *field = qlt_cfg_cfield(cfg, e);
    char rule[160];
    if (e->type == QLT_CFG_ENUM) {
        int v = *(const int *)field;
        if (!qlt_cfg_enum_text(e, v))
            return qlt_fail("%s = %d: expected one of %s (e.g. --set %s=%s)", e->info.name, v, e->info.choices,
                            e->info.name, e->info.default_text);
    } else if (e->type == QLT_CFG_BOOL) {
        int v = *(const int *)field;
        if (v != 0 && v != 1) return invalid(cfg, e, 0, "must be true or false");
    } else if (e->type == QLT_CFG_TARGETS) {
        unsigned v = *(const unsigned *)field;
        if (v == 0 || (v & ~(unsigned)QLT_TARGET_ALL))
            return qlt_fail("%s: %s (e.g. --set %s=all-linear or --set '%s=[q,v]')", e->info.name,
                            v == 0 ? "no projection is chosen" : "holds bits that name no projection",
                            e->info.name, e->info.name);
    } else if (e->type == QLT_CFG_PATHS) {
        const qlt_path_list *list = field;
        if (list->count < 0 || list->count > QLT_MAX_PATHS)
            return qlt_fail("%s: %d paths; give 0 to %d", e->info.name, list->count, QLT_MAX_PATHS);
        for (int k = 0; k < list->count; k++)
            if (!list->items[k] || !list->items[k][0])
                return qlt_fail("%s: path %d is empty; remove it or name a file", e->info.name, k + 1);
    }
    if (!e->info.range) return 0;
    int n = e->type == QLT_CFG_FLOAT_PAIR ? 2 : 1;
    for (int i = 0; i < n; i++) {
        if (qlt_cfg_in_range(e, qlt_cfg_number(cfg, e, i))) continue;
        qlt_cfg_range_rule(e, rule, sizeof rule);
        return invalid(cfg, e, i, rule);
    }
    return 0;
}

int qlt_config_validate(const qlt_config *cfg) {
    for (int64_t i = 0; i < qlt_cfg_count(); i++) QLT_TRY(validate_key(cfg, qlt_cfg_at(i)));
    int bs = cfg->model.nf4_blocksize;
    if (bs & (bs - 1))
        return qlt_fail("model.nf4_blocksize = %d: must be a power of two from 32 to 4096 "
                        "(e.g. --set model.nf4_blocksize=64)", bs);
    if (cfg->train.max_steps == 0 && !(cfg->train.epochs > 0))
        return qlt_fail("train.epochs = %g with train.max_steps = 0: nothing would be trained; set "
                        "--set train.epochs=1 or --set train.max_steps=<steps>", cfg->train.epochs);
    if (cfg->train.warmup_steps > 0 && cfg->train.warmup_ratio > 0)
        return qlt_fail("train.warmup_steps = %lld and train.warmup_ratio = %g are both set; keep one "
                        "(e.g. --set train.warmup_ratio=0)", (long long)cfg->train.warmup_steps,
                        cfg->train.warmup_ratio);
    if (cfg->data.eval_split > 0 && cfg->data.eval.count > 0)
        return qlt_fail("data.eval_split = %g and data.eval are both set; keep one (e.g. --set data.eval_split=0)",
                        cfg->data.eval_split);
    if (cfg->train.early_stopping_patience > 0 && (cfg->train.eval_every <= 0 ||
                                                   (cfg->data.eval.count == 0 && !(cfg->data.eval_split > 0))))
        return qlt_fail("train.early_stopping_patience = %d needs evaluations: set data.eval (or data.eval_split) and "
                        "train.eval_every > 0, or --set train.early_stopping_patience=0",
                        cfg->train.early_stopping_patience);
    if (!cfg->output.dir || !cfg->output.dir[0])
        return qlt_fail("output.dir is empty: name a run directory (e.g. --set output.dir=runs/demo)");
    return 0;
}

/* ---- writing ---------------------------------------------------------------------------------------- */

static cJSON *number_json(const qlt_config *cfg, const qlt_cfg_entry *e, int index) {
    char text[64];
    qlt_cfg_format_number(cfg, e, index, text, sizeof text);
    return cJSON_CreateRaw(text);
}

static cJSON *value_json(const qlt_config *cfg, const qlt_cfg_entry *e) {
    const void *field = qlt_cfg_cfield(cfg, e);
    cJSON *list;
    switch (e->type) {
    case QLT_CFG_BOOL: return cJSON_CreateBool(*(const int *)field);
    case QLT_CFG_STRING: {
        const char *s = *(char *const *)field;
        return cJSON_CreateString(s ? s : "");
    }
    case QLT_CFG_ENUM: {
        const char *s = qlt_cfg_enum_text(e, *(const int *)field);
        return cJSON_CreateString(s ? s : "");
    }
    case QLT_CFG_PATHS: {
        const qlt_path_list *paths = field;
        list = cJSON_CreateArray();
        for (int k = 0; k < paths->count; k++) cJSON_AddItemToArray(list, cJSON_CreateString(paths->items[k]));
        return list;
    }
    case QLT_CFG_FLOAT_PAIR:
        list = cJSON_CreateArray();
        for (int k = 0; k < 2; k++) cJSON_AddItemToArray(list, number_json(cfg, e, k));
        return list;
    case QLT_CFG_TARGETS:
        list = cJSON_CreateArray();
        for (int bit = 0; bit < 7; bit++)
            if (*(const unsigned *)field & (1u << bit))
                cJSON_AddItemToArray(list, cJSON_CreateString(qlt_cfg_target_name(bit)));
        return list;
    default: return number_json(cfg, e, 0);
    }
}

char *qlt_config_value_text(const qlt_config *cfg, int64_t i) {
    cJSON *v = value_json(cfg, qlt_cfg_at(i));
    char *text = cJSON_PrintUnformatted(v);
    cJSON_Delete(v);
    QLT_ASSERT(text);
    char *copy = qlt_xstrdup(text);
    cJSON_free(text);
    return copy;
}

/* Writes text to path through path.tmp and a rename, so a crash never leaves half a file. */
static int write_atomically(const char *path, const char *text) {
    size_t n = strlen(path) + 5;
    char *tmp = qlt_xmalloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    int saved = errno;
    if (f && fclose(f) != 0 && ok) ok = 0, saved = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, saved = errno;
    if (!ok) remove(tmp);
    free(tmp);
    if (!ok) return qlt_fail("%s: cannot write the config: %s (check that the directory exists and is writable)",
                             path, strerror(saved));
    return 0;
}

int qlt_config_write_json(const qlt_config *cfg, const char *path) {
    cJSON *root = cJSON_CreateObject(), *section = NULL;
    for (int64_t i = 0; i < qlt_cfg_count(); i++) {
        const qlt_cfg_entry *e = qlt_cfg_at(i);
        const char *key = strchr(e->info.name, '.') + 1;
        if (qlt_cfg_starts_section(i)) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(key - 1 - e->info.name), e->info.name);
            section = cJSON_AddObjectToObject(root, name);
        }
        cJSON_AddItemToObject(section, key, value_json(cfg, e));
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    QLT_ASSERT(text);
    int rc = write_atomically(path, text);
    cJSON_free(text);
    return rc;
}

void qlt_config_fprint_help(FILE *out) {
    fprintf(out, "Configuration keys. In a YAML or JSON file each key goes inside its section (a line `train:`,\n"
                 "then `  lr: 1e-4` under it); on the command line write --set section.key=value\n"
                 "(--set train.lr=1e-4, --set lora.targets=[q,v]).\n");
    for (int64_t i = 0; i < qlt_cfg_count(); i++) {
        const qlt_config_key *k = &qlt_cfg_at(i)->info;
        if (qlt_cfg_starts_section(i)) fprintf(out, "\n%.*s:\n", (int)(strchr(k->name, '.') - k->name), k->name);
        fprintf(out, "  %s  (%s, default %s", k->name, k->type, k->default_text);
        if (k->choices) fprintf(out, "; one of %s", k->choices);
        if (k->range) fprintf(out, "; range %s", k->range);
        fprintf(out, ")\n      %s\n", k->help);
    }
}

void qlt_config_print_help(void) { qlt_config_fprint_help(stdout); }

int qlt_config_apply_model_fallback(qlt_config *cfg) {
    const char *path = cfg->model.path, *fallback = cfg->model.fallback;
    if (!fallback || !fallback[0] || !path || !path[0]) return 0;
    const char *file = strncmp(path, "random:", 7) == 0 ? path + 7 : path;
    if (access(file, F_OK) == 0) return 0;
    fprintf(stderr, "qlora-train: model.path %s does not exist: using model.fallback %s instead\n", path, fallback);
    char *swap = cfg->model.path;
    cfg->model.path = qlt_xstrdup(fallback);
    free(swap);
    /* the value now comes from where model.fallback was set */
    cfg->origin[qlt_cfg_find("model.path") - qlt_cfg_at(0)] = cfg->origin[qlt_cfg_find("model.fallback") - qlt_cfg_at(0)];
    return 1;
}

void qlt_config_suggest_key(const char *name, char *buf, size_t size) { qlt_cfg_suggest_key(name, buf, size); }
