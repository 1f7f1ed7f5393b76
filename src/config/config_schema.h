/* config_schema.h: the one table of configuration keys and the code that is generic over it: reading a
 * value (from a YAML/JSON node) into the struct, range checks, suggestions for unknown keys, copying,
 * freeing and comparing. Private to src/config/config*.c; the public view is qlt_config_key in config.h. */
#ifndef QLT_CONFIG_SCHEMA_H
#define QLT_CONFIG_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "config/config_doc.h"

typedef enum {
    QLT_CFG_INT,        /* int */
    QLT_CFG_INT64,      /* int64_t */
    QLT_CFG_UINT64,     /* uint64_t */
    QLT_CFG_FLOAT,      /* float */
    QLT_CFG_BOOL,       /* int, 0 or 1 */
    QLT_CFG_STRING,     /* char *, heap-owned */
    QLT_CFG_ENUM,       /* a C enum (int-sized), one of info.values[].value */
    QLT_CFG_PATHS,      /* qlt_path_list */
    QLT_CFG_FLOAT_PAIR, /* float[2] */
    QLT_CFG_TARGETS,    /* unsigned, QLT_TARGET_* bits */
} qlt_cfg_type;

typedef struct qlt_cfg_entry {
    qlt_config_key info;  /* name, type name, default text, help, choices, range */
    qlt_cfg_type type;
    size_t offset;        /* offsetof(qlt_config, field) */
    const char *aliases;  /* other names users type for this key (Hugging Face, axolotl), '|'-separated */
} qlt_cfg_entry;

/* Where a value came from, for error messages: a file (and the node's line) or a --set assignment. */
typedef struct qlt_cfg_where {
    const char *file;       /* NULL for --set */
    const char *assignment; /* --set: the whole "section.key=value" */
} qlt_cfg_where;

int64_t qlt_cfg_count(void);
const qlt_cfg_entry *qlt_cfg_at(int64_t i);
/* The entry named "section.key", or NULL. */
const qlt_cfg_entry *qlt_cfg_find(const char *name);
/* 1 when entry i is the first of its section (the table is grouped by section). */
int qlt_cfg_starts_section(int64_t i);
/* 1 when `name` is a section ("model", "lora", ...). */
int qlt_cfg_is_section(const char *name);

/* Writes the parenthesized hint that follows "unknown key 'x'" / "unknown section 'x'":
 * " (did you mean 'train.lr'?)", or the valid keys of the section, or the valid sections. */
void qlt_cfg_suggest_key(const char *name, char *buf, size_t size);
void qlt_cfg_suggest_section(const char *name, char *buf, size_t size);

/* Reads `value` into the entry's field of cfg, checking type and range; errors name `where`. */
int qlt_cfg_apply(qlt_config *cfg, const qlt_cfg_entry *e, const qlt_doc_node *value, const qlt_cfg_where *where);

/* The entry's numeric value as a double (for range checks); bools and targets count too. */
double qlt_cfg_number(const qlt_config *cfg, const qlt_cfg_entry *e, int index);
/* The number field as text that reads back to the same value: ints in full, floats in the fewest digits
 * that round-trip ("0.0002", "1e-08"); "null" for a float that is not finite. */
void qlt_cfg_format_number(const qlt_config *cfg, const qlt_cfg_entry *e, int index, char *buf, size_t size);
/* 1 when v lies in the entry's range text ("[1, inf)", "(0, 1]"); entries without a range accept all. */
int qlt_cfg_in_range(const qlt_cfg_entry *e, double v);
/* "must be >= 1", "must be in [0, 1)" for an entry with a range. */
void qlt_cfg_range_rule(const qlt_cfg_entry *e, char *buf, size_t size);

/* The text of an enum entry's value, or NULL when the entry has no such value. */
const char *qlt_cfg_enum_text(const qlt_cfg_entry *e, int value);

/* Pointers into the struct for an entry. */
void *qlt_cfg_field(qlt_config *cfg, const qlt_cfg_entry *e);
const void *qlt_cfg_cfield(const qlt_config *cfg, const qlt_cfg_entry *e);

/* The HF module name of target bit i (0..6: q_proj ... down_proj). */
const char *qlt_cfg_target_name(int bit);

#endif
