/* config.h: the run configuration: one struct, filled from defaults, then a YAML or JSON file, then
 * `--set section.key=value` overrides, in that order.
 *
 * Every key has a default, a type and a one-line help (the schema lives in config_schema.c and is what
 * `qlora-train help config` prints). Unknown keys are errors naming the key and the nearest valid one;
 * values of the wrong type are errors naming the file, line and key. Strings are owned by the struct.
 * Keys with a fixed set of values are C enums, read from their text once when the value is set; the schema
 * maps each value to the text that files, --set, the help and the written JSON use. */
#ifndef QLT_CONFIG_H
#define QLT_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define QLT_MAX_PATHS 16

typedef struct qlt_path_list {
    int count;
    char *items[QLT_MAX_PATHS];
} qlt_path_list;

/* Bit set of LoRA target projections. */
enum {
    QLT_TARGET_Q = 1 << 0,
    QLT_TARGET_K = 1 << 1,
    QLT_TARGET_V = 1 << 2,
    QLT_TARGET_O = 1 << 3,
    QLT_TARGET_GATE = 1 << 4,
    QLT_TARGET_UP = 1 << 5,
    QLT_TARGET_DOWN = 1 << 6,
    QLT_TARGET_ALL = 0x7f,
};

/* The enum-valued keys. Each enum's values follow the order of the key's choices (the first is the default),
 * and its *_COUNT is the number of values, not a value. */
typedef enum qlt_quant { /* model.quant */
    QLT_QUANT_NF4,
    QLT_QUANT_NONE,
    QLT_QUANT_COUNT
} qlt_quant;
typedef enum qlt_data_format { /* data.format */
    QLT_DATA_FORMAT_TEXT,
    QLT_DATA_FORMAT_COMPLETION,
    QLT_DATA_FORMAT_ALPACA,
    QLT_DATA_FORMAT_CHAT,
    QLT_DATA_FORMAT_TOKENS,
    QLT_DATA_FORMAT_COUNT
} qlt_data_format;
typedef enum qlt_chat_template { /* data.chat_template */
    QLT_CHAT_TEMPLATE_AUTO,
    QLT_CHAT_TEMPLATE_CHATML,
    QLT_CHAT_TEMPLATE_LLAMA3,
    QLT_CHAT_TEMPLATE_MISTRAL,
    QLT_CHAT_TEMPLATE_PHI3,
    QLT_CHAT_TEMPLATE_GEMMA,
    QLT_CHAT_TEMPLATE_COUNT
} qlt_chat_template;
typedef enum qlt_device { /* train.device */
    QLT_DEVICE_AUTO,
    QLT_DEVICE_CPU,
    QLT_DEVICE_CUDA,
    QLT_DEVICE_COUNT
} qlt_device;
typedef enum qlt_lr_schedule { /* train.schedule */
    QLT_LR_SCHEDULE_CONSTANT,
    QLT_LR_SCHEDULE_LINEAR,
    QLT_LR_SCHEDULE_COSINE,
    QLT_LR_SCHEDULE_COUNT
} qlt_lr_schedule;
typedef enum qlt_backward_precision { /* train.backward_a */
    QLT_BACKWARD_PRECISION_BF16,
    QLT_BACKWARD_PRECISION_FP16,
    QLT_BACKWARD_PRECISION_FP32,
    QLT_BACKWARD_PRECISION_COUNT
} qlt_backward_precision;
typedef enum qlt_grad_checkpoint { /* train.grad_checkpoint */
    QLT_GRAD_CHECKPOINT_NONE,
    QLT_GRAD_CHECKPOINT_LAYER,
    QLT_GRAD_CHECKPOINT_AUTO,
    QLT_GRAD_CHECKPOINT_COUNT
} qlt_grad_checkpoint;
typedef enum qlt_attention_impl { /* train.attention */
    QLT_ATTENTION_IMPL_AUTO,
    QLT_ATTENTION_IMPL_OWN,
    QLT_ATTENTION_IMPL_CUDNN,
    QLT_ATTENTION_IMPL_COUNT
} qlt_attention_impl;

/* Where a key's value came from (what `train --dry-run` prints beside it). */
typedef enum qlt_config_origin_kind {
    QLT_ORIGIN_DEFAULT = 0, /* the schema's default */
    QLT_ORIGIN_FILE,        /* the config file, at origin line */
    QLT_ORIGIN_SET,         /* a --set override */
    QLT_ORIGIN_ENV,         /* an environment variable (origin line: its qlt_env_var) */
} qlt_config_origin_kind;
typedef struct qlt_config_origin {
    int kind; /* qlt_config_origin_kind */
    int line; /* FILE: the value's line (1-based); ENV: the variable; else 0 */
} qlt_config_origin;
#define QLT_CONFIG_MAX_KEYS 128

typedef struct qlt_config {
    struct {
        char *path;        /* model directory (config.json + *.safetensors), a .gguf file or random:CONFIG.json */
        char *fallback;    /* "" or the model.path used when path does not exist */
        qlt_quant quant;   /* nf4 | none */
        int nf4_blocksize; /* 64 */
        int double_quant;  /* 1 */
    } model;
    struct {
        int r;             /* 16 */
        float alpha;       /* 32 */
        unsigned targets;  /* QLT_TARGET_* bits; config accepts a list of q,k,v,o,gate,up,down (or *_proj)
                              or "all-linear" */
        float dropout;     /* 0 */
        int rslora;        /* 0: scale = alpha / r; 1: alpha / sqrt(r) */
        char *init_from;   /* "" or a PEFT adapter dir */
    } lora;
    struct {
        qlt_path_list train; /* .jsonl / .jsonl.gz files */
        qlt_path_list eval;
        qlt_data_format format; /* text | completion | alpaca | chat | tokens */
        int seq_len;         /* 2048 */
        int packing;         /* 1 */
        int shuffle;         /* 1 */
        char *tokenizer;     /* "" = <model.path>/tokenizer.json */
        qlt_chat_template chat_template; /* auto | chatml | llama3 | mistral | phi3 | gemma */
        int train_on_prompt; /* 0 */
        float eval_split;    /* 0 */
        int skip_bad;        /* 0 */
        int cache;           /* 1: cache the tokenized, packed dataset in output.dir/cache/ */
        char *cache_dir;     /* "" = output.dir/cache; a sweep shares <sweep dir>/cache between its runs */
        int threads;         /* 0 = all cores, for tokenizing */
    } data;
    struct {
        qlt_device device;   /* auto | cpu | cuda */
        uint64_t seed;       /* 42 */
        int micro_batch;     /* 1 */
        int grad_accum;      /* 1 */
        int64_t max_steps;   /* 0 = run train.epochs */
        float epochs;        /* 1 */
        float lr;            /* 2e-4 */
        float betas[2];      /* 0.9, 0.999 */
        float eps;           /* 1e-8 */
        float weight_decay;  /* 0.0 */
        float max_grad_norm; /* 1.0; 0 = off */
        int max_bad_steps;   /* 10: consecutive non-finite (skipped) steps that stop the run; 0 = never */
        qlt_lr_schedule schedule; /* constant | linear | cosine */
        int64_t warmup_steps;/* 0 */
        float warmup_ratio;  /* 0 */
        float min_lr_ratio;  /* 0 */
        qlt_backward_precision backward_a; /* bf16 | fp16 | fp32 */
        qlt_grad_checkpoint grad_checkpoint; /* none | layer | auto */
        int cuda_graph;      /* 0 (the CUDA_GRAPH=1 environment variable also turns it on) */
        int deterministic;   /* 0: fastest kernels (GPU results' last bits may vary run to run) */
        qlt_attention_impl attention; /* auto | own | cudnn (CUDA: whose attention kernels run) */
        float dequant_cache_gib; /* 0 = off: GiB that keep frozen weights dequantized (be->dequant_cache_bytes) */
        int64_t eval_every;  /* 0 = only at the end when data.eval is set */
        int eval_at_start;   /* 1: a fresh run with eval data also evaluates before step 1 */
        int early_stopping_patience;    /* 0 = off: evals without improvement before the run ends */
        float early_stopping_min_delta; /* 0: how much an eval loss must improve on the best to count */
        int log_every;       /* 1 */
        int threads;         /* 0 = all cores, for the CPU path */
        int cpu_reference;   /* 0: the CPU backend's fast ops; 1: its reference ops (double sums) */
        float dist_timeout_s; /* 600: data parallel's rendezvous and all-reduce timeout */
    } train;
    struct {
        char *dir;           /* "runs/demo" */
        int64_t save_every;  /* 0 = only the final adapter */
        int keep_last;       /* 0 = keep every checkpoint */
        int save_best;       /* 0; 1: output.dir/best/ holds the checkpoint of the lowest eval loss */
        int overwrite;       /* 0: a step-0 run refuses a dir holding an earlier run; 1: deletes it first */
        char *sample_prompt; /* "" = none: answered before training and at the end (samples.jsonl) */
        int sample_tokens;   /* 96: most new tokens of a sample answer */
        int tensorboard;     /* 0; 1: also write output.dir/events.out.tfevents.* */
    } output;
    qlt_config_origin origin[QLT_CONFIG_MAX_KEYS]; /* [key index of the schema]: where each value came from */
} qlt_config;

/* A target projection name (q, k, v, o, gate, up, down, their *_proj names, or all-linear; case-insensitive)
 * as QLT_TARGET_* bits. Returns 0, or -1 when unknown. */
int qlt_config_target_bits(const char *name, unsigned *bits);

/* Fills every field with its default. */
void qlt_config_defaults(qlt_config *cfg);
/* Reads a YAML (.yaml/.yml) or JSON (.json) file over the current values. */
int qlt_config_load_file(qlt_config *cfg, const char *path);
/* Applies one "section.key=value" override (value parsed as YAML scalar / flow list). */
int qlt_config_set(qlt_config *cfg, const char *assignment);
/* Checks cross-key constraints (r > 0, seq_len >= 2, enum fields holding one of their values, ...). */
int qlt_config_validate(const qlt_config *cfg);
/* model.fallback: when model.path names nothing that exists and a fallback is set, model.path becomes the fallback
 * and one line on stderr says so. Returns 1 when it switched, else 0. */
int qlt_config_apply_model_fallback(qlt_config *cfg);
/* Environment variables that mirror a key, applied over the file (before --set): CUDA_GRAPH (1/0, true/false,
 * yes/no, on/off, any case) sets train.cuda_graph. 0, or -1 with a one-line error naming the variable and the
 * values it accepts (config_env.c). */
int qlt_config_apply_env(qlt_config *cfg);
/* The value of key i as JSON text (as run_config.json writes it: "cosine", 0.0002, ["a.jsonl"]); heap. */
char *qlt_config_value_text(const qlt_config *cfg, int64_t i);
/* Writes the effective configuration as JSON (for the run directory and checkpoints). */
int qlt_config_write_json(const qlt_config *cfg, const char *path);
/* Prints every key with type, default and help. */
void qlt_config_print_help(void);
void qlt_config_free(qlt_config *cfg);

/* One value of an enum key: the text files, --set and the written JSON use, and the C enum value. */
typedef struct qlt_config_enum_value {
    const char *text; /* "nf4" */
    int value;        /* QLT_QUANT_NF4 */
} qlt_config_enum_value;

/* One key as documented: what qlt_config_print_help prints and docs/CONFIG.md lists. */
typedef struct qlt_config_key {
    const char *name;         /* "section.key" */
    const char *type;         /* int | int64 | uint64 | float | bool | string | enum | path list | float pair |
                                 targets */
    const char *default_text; /* the default, written as in a YAML file */
    const char *help;         /* one line */
    const char *choices;      /* enum: the allowed values, "nf4, none"; NULL otherwise */
    const char *range;        /* numbers: the accepted interval, "[1, inf)"; NULL when any value goes */
    const qlt_config_enum_value *values; /* enum: [value_count] rows in the order of choices; NULL otherwise */
    int value_count;
    int enum_count;           /* enum: the number of values of its C enum (QLT_QUANT_COUNT); 0 otherwise */
} qlt_config_key;

/* The schema, in file order (sections model, lora, data, train, output): keys 0 .. count-1. */
int64_t qlt_config_key_count(void);
const qlt_config_key *qlt_config_key_at(int64_t i);
/* The text of value `value` of enum key `key` ("data.format", QLT_DATA_FORMAT_CHAT -> "chat"), for messages
 * and hashes; "?" for a value the key does not have. `key` must name an enum key. */
const char *qlt_config_enum_text(const char *key, int value);
/* qlt_config_print_help, to any stream. */
void qlt_config_fprint_help(FILE *out);
/* The did-you-mean hint that follows "unknown key 'x'": " (did you mean 'train.lr'?)" or the valid keys or
 * sections (for other readers of config keys, such as a sweep file). */
void qlt_config_suggest_key(const char *name, char *buf, size_t size);
/* Deep copy: dst gets its own strings. dst's old contents are not freed (free them first if any). */
void qlt_config_copy(qlt_config *dst, const qlt_config *src);
/* The name of the first key whose value differs ("train.lr"), or NULL when a and b are equal. */
const char *qlt_config_first_difference(const qlt_config *a, const qlt_config *b);

#endif
