/* config_schema.c: the one table of configuration keys (name, type, field, default, range, help) and the
 * code that is generic over it: reading a YAML/JSON value into a field with type and range checks,
 * "did you mean" suggestions, copy, free and compare. Defaults are kept as text and read through the same
 * code as a config file, so what the help and docs say is exactly what a run gets. */
#include "config/config_schema.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/edit_distance.h"
#include "common/error.h"

#define F(field) offsetof(qlt_config, field)
/* One macro per type keeps each row of the table to what differs: key, field, default, range, aliases, help. */
#define INFO(k, t, d, h, r) {k, t, d, h, NULL, r, NULL, 0, 0}
#define INT_KEY(k, f, d, r, a, h) {INFO(k, "int", d, h, r), QLT_CFG_INT, F(f), a}
#define INT64_KEY(k, f, d, r, a, h) {INFO(k, "int64", d, h, r), QLT_CFG_INT64, F(f), a}
#define UINT64_KEY(k, f, d, a, h) {INFO(k, "uint64", d, h, NULL), QLT_CFG_UINT64, F(f), a}
#define FLOAT_KEY(k, f, d, r, a, h) {INFO(k, "float", d, h, r), QLT_CFG_FLOAT, F(f), a}
#define BOOL_KEY(k, f, d, a, h) {INFO(k, "bool", d, h, NULL), QLT_CFG_BOOL, F(f), a}
#define STRING_KEY(k, f, d, a, h) {INFO(k, "string", d, h, NULL), QLT_CFG_STRING, F(f), a}
/* An enum key: c is the choices as the help prints them, v the (text, value) table in that order, n its C enum's
 * *_COUNT. */
#define ENUM_KEY(k, f, d, c, v, n, a, h)                                                                     \
    {{k, "enum", d, h, c, NULL, v, (int)(sizeof v / sizeof v[0]), n}, QLT_CFG_ENUM, F(f), a}
#define PATHS_KEY(k, f, a, h) {INFO(k, "path list", "[]", h, NULL), QLT_CFG_PATHS, F(f), a}
#define PAIR_KEY(k, f, d, r, a, h) {INFO(k, "float pair", d, h, r), QLT_CFG_FLOAT_PAIR, F(f), a}
#define TARGETS_KEY(k, f, d, a, h) {INFO(k, "targets", d, h, NULL), QLT_CFG_TARGETS, F(f), a}

/* The values of each enum key. Enum fields are read and written as int (qlt_cfg_apply, validation). */
static const qlt_config_enum_value quant_values[] = {{"nf4", QLT_QUANT_NF4}, {"none", QLT_QUANT_NONE}};
static const qlt_config_enum_value format_values[] = {
    {"text", QLT_DATA_FORMAT_TEXT},   {"completion", QLT_DATA_FORMAT_COMPLETION}, {"alpaca", QLT_DATA_FORMAT_ALPACA},
    {"chat", QLT_DATA_FORMAT_CHAT},   {"tokens", QLT_DATA_FORMAT_TOKENS},
};
static const qlt_config_enum_value chat_template_values[] = {
    {"auto", QLT_CHAT_TEMPLATE_AUTO},       {"chatml", QLT_CHAT_TEMPLATE_CHATML}, {"llama3", QLT_CHAT_TEMPLATE_LLAMA3},
    {"mistral", QLT_CHAT_TEMPLATE_MISTRAL}, {"phi3", QLT_CHAT_TEMPLATE_PHI3}, {"gemma", QLT_CHAT_TEMPLATE_GEMMA}};
static const qlt_config_enum_value device_values[] = {
    {"auto", QLT_DEVICE_AUTO}, {"cpu", QLT_DEVICE_CPU}, {"cuda", QLT_DEVICE_CUDA}};
static const qlt_config_enum_value schedule_values[] = {
    {"constant", QLT_LR_SCHEDULE_CONSTANT}, {"linear", QLT_LR_SCHEDULE_LINEAR}, {"cosine", QLT_LR_SCHEDULE_COSINE}};
static const qlt_config_enum_value backward_a_values[] = {{"bf16", QLT_BACKWARD_PRECISION_BF16},
                                                          {"fp16", QLT_BACKWARD_PRECISION_FP16},
                                                          {"fp32", QLT_BACKWARD_PRECISION_FP32}};
static const qlt_config_enum_value grad_checkpoint_values[] = {
    {"none", QLT_GRAD_CHECKPOINT_NONE}, {"layer", QLT_GRAD_CHECKPOINT_LAYER}, {"auto", QLT_GRAD_CHECKPOINT_AUTO}};
static const qlt_config_enum_value attention_values[] = {
    {"auto", QLT_ATTENTION_IMPL_AUTO}, {"own", QLT_ATTENTION_IMPL_OWN}, {"cudnn", QLT_ATTENTION_IMPL_CUDNN}};
_Static_assert(sizeof(qlt_quant) == sizeof(int) && sizeof(qlt_data_format) == sizeof(int) &&
                   sizeof(qlt_chat_template) == sizeof(int) && sizeof(qlt_device) == sizeof(int) &&
                   sizeof(qlt_lr_schedule) == sizeof(int) && sizeof(qlt_backward_precision) == sizeof(int) &&
                   sizeof(qlt_grad_checkpoint) == sizeof(int) && sizeof(qlt_attention_impl) == sizeof(int),
               "enum fields are read and written as int");

static const qlt_cfg_entry schema[] = {
    STRING_KEY("model.path", model.path, "\"\"", "base_model|model_name_or_path|model_path|model_dir",
               "model directory (config.json, *.safetensors, tokenizer.json), a llama.cpp .gguf file, or random:CONFIG.json (random weights); required"),
    STRING_KEY("model.fallback", model.fallback, "\"\"", "fallback_model",
               "a model.path to use instead, with a one-line notice, when model.path does not exist (the demo: its "
               "downloaded model, else a random one); \"\" = none: a missing model.path is an error"),
    ENUM_KEY("model.quant", model.quant, "nf4", "nf4, none", quant_values, QLT_QUANT_COUNT,
             "quantization|load_in_4bit|bnb_4bit_quant_type",
             "how the frozen base is stored: nf4 = 4-bit NormalFloat blocks (QLoRA), none = bf16"),
    INT_KEY("model.nf4_blocksize", model.nf4_blocksize, "64", "[32, 4096]", "blocksize|block_size",
            "weights per NF4 block, each with its own absmax scale; a power of two"),
    BOOL_KEY("model.double_quant", model.double_quant, "true", "bnb_4bit_use_double_quant|double_quantization",
             "quantize the NF4 absmax scales again to 8 bits (blocks of 256), saving ~0.4 bit per weight"),

    INT_KEY("lora.r", lora.r, "16", "[1, inf)", "rank|lora_r", "LoRA rank: A is [r, in], B is [out, r]"),
    FLOAT_KEY("lora.alpha", lora.alpha, "32", "(0, inf)", "lora_alpha",
              "LoRA scale numerator: updates are scaled by alpha / r (alpha / sqrt(r) with lora.rslora)"),
    TARGETS_KEY("lora.targets", lora.targets, "all-linear", "target_modules|lora_target_modules|target",
                "projections that get adapters: a list of q, k, v, o, gate, up, down (or q_proj ... down_proj), "
                "or all-linear"),
    FLOAT_KEY("lora.dropout", lora.dropout, "0", "[0, 1)", "lora_dropout",
              "dropout on the adapter input while training"),
    BOOL_KEY("lora.rslora", lora.rslora, "false", "use_rslora",
             "rank-stabilized LoRA: scale by alpha / sqrt(r) instead of alpha / r"),
    STRING_KEY("lora.init_from", lora.init_from, "\"\"", "adapter|lora_model_dir|resume_adapter",
               "start from this PEFT adapter directory instead of a fresh init (\"\" = fresh)"),

    PATHS_KEY("data.train", data.train, "train_file|train_files|dataset|datasets",
              "training data: a .jsonl / .jsonl.gz file or a list of them"),
    PATHS_KEY("data.eval", data.eval, "eval_file|validation_file|test_datasets",
              "evaluation data, same formats as data.train ([] = none)"),
    ENUM_KEY("data.format", data.format, "text", "text, completion, alpaca, chat, tokens", format_values,
             QLT_DATA_FORMAT_COUNT, "type|dataset_format",
             "record layout: text {text}, completion {prompt, completion}, alpaca {instruction, input, output}, "
             "chat {messages}, tokens {input_ids}"),
    INT_KEY("data.seq_len", data.seq_len, "2048", "[2, inf)",
            "max_seq_length|max_seq_len|sequence_len|seq_length|max_length|context_length",
            "tokens per training sequence (packed or padded to this length)"),
    BOOL_KEY("data.packing", data.packing, "true", "sample_packing|pack",
             "pack several documents into each sequence (attention never crosses documents)"),
    BOOL_KEY("data.shuffle", data.shuffle, "true", "shuffle_data",
             "shuffle the sequences every epoch (seeded by train.seed)"),
    STRING_KEY("data.tokenizer", data.tokenizer, "\"\"", "tokenizer_path|tokenizer_name",
               "tokenizer.json to use (\"\" = <model.path>/tokenizer.json, or a .gguf model's own tokenizer)"),
    ENUM_KEY("data.chat_template", data.chat_template, "auto", "auto, chatml, llama3, mistral, phi3, gemma",
             chat_template_values,
             QLT_CHAT_TEMPLATE_COUNT, "template",
             "chat format for data.format chat; auto = take it from the tokenizer / model"),
    BOOL_KEY("data.train_on_prompt", data.train_on_prompt, "false", "train_on_inputs",
             "also compute the loss on prompt / user tokens (by default only completions count)"),
    FLOAT_KEY("data.eval_split", data.eval_split, "0", "[0, 1)", "val_set_size|validation_split",
              "fraction of data.train held out for evaluation (when data.eval is empty)"),
    BOOL_KEY("data.skip_bad", data.skip_bad, "false", "skip_invalid|skip_errors",
             "skip malformed records with a warning instead of stopping at the first one"),
    BOOL_KEY("data.cache", data.cache, "true", "dataset_cache",
             "cache the tokenized, packed dataset in output.dir/cache/ and reuse it while the inputs are unchanged"),
    STRING_KEY("data.cache_dir", data.cache_dir, "\"\"", "dataset_cache_dir",
               "directory of the tokenized-dataset cache (\"\" = output.dir/cache; runs may share one)"),
    INT_KEY("data.threads", data.threads, "0", "[0, inf)", "num_proc|dataset_num_proc",
            "threads for tokenizing (0 = all cores)"),

    ENUM_KEY("train.device", train.device, "auto", "auto, cpu, cuda", device_values, QLT_DEVICE_COUNT, "device_map",
             "where to train: auto = cuda when a GPU is present, else cpu"),
    UINT64_KEY("train.seed", train.seed, "42", "random_seed",
               "seed for adapter init, dropout and shuffling (data.eval_split takes the last rows, unseeded)"),
    INT_KEY("train.micro_batch", train.micro_batch, "1", "[1, inf)",
            "per_device_train_batch_size|micro_batch_size|batch_size",
            "sequences per forward/backward pass"),
    INT_KEY("train.grad_accum", train.grad_accum, "1", "[1, inf)",
            "gradient_accumulation_steps|gradient_accumulation",
            "micro-batches per optimizer step (effective batch = micro_batch * grad_accum, times the ranks of a data "
            "parallel run)"),
    INT64_KEY("train.max_steps", train.max_steps, "0", "[0, inf)", "steps|num_steps|total_steps",
              "optimizer steps to run; 0 = run train.epochs"),
    FLOAT_KEY("train.epochs", train.epochs, "1", "[0, inf)", "num_train_epochs|num_epochs",
              "passes over data.train when train.max_steps is 0 (fractions allowed)"),
    FLOAT_KEY("train.lr", train.lr, "2e-4", "(0, inf)", "learning_rate", "peak learning rate (AdamW)"),
    PAIR_KEY("train.betas", train.betas, "[0.9, 0.999]", "[0, 1)", "adam_betas|adam_beta1|adam_beta2",
             "AdamW beta1 and beta2"),
    FLOAT_KEY("train.eps", train.eps, "1e-8", "(0, inf)", "adam_epsilon|epsilon",
              "AdamW epsilon (added after the square root)"),
    FLOAT_KEY("train.weight_decay", train.weight_decay, "0", "[0, inf)", "wd",
              "decoupled AdamW weight decay on the LoRA weights"),
    FLOAT_KEY("train.max_grad_norm", train.max_grad_norm, "1.0", "[0, inf)",
              "clip_grad_norm|grad_clip|gradient_clipping",
              "clip the global gradient L2 norm to this; 0 = no clipping"),
    INT_KEY("train.max_bad_steps", train.max_bad_steps, "10", "[0, inf)", "max_skipped_steps",
            "a step whose loss or gradient norm is NaN or infinite is skipped (the adapter and AdamW state stay as "
            "they were); after this many skipped in a row the run stops with a checkpoint of the last good state; "
            "0 = never stop"),
    ENUM_KEY("train.schedule", train.schedule, "constant", "constant, linear, cosine", schedule_values,
             QLT_LR_SCHEDULE_COUNT, "lr_scheduler_type|lr_scheduler|scheduler", "learning-rate schedule after warmup"),
    INT64_KEY("train.warmup_steps", train.warmup_steps, "0", "[0, inf)", "warmup|num_warmup_steps",
              "steps of linear warmup from 0 to train.lr"),
    FLOAT_KEY("train.warmup_ratio", train.warmup_ratio, "0", "[0, 1]", "warmup_fraction",
              "warmup as a fraction of all steps (set this or train.warmup_steps, not both)"),
    FLOAT_KEY("train.min_lr_ratio", train.min_lr_ratio, "0", "[0, 1]", "min_lr|cosine_min_lr_ratio",
              "where linear / cosine decay ends, as a fraction of train.lr"),
    ENUM_KEY("train.backward_a", train.backward_a, "bf16", "bf16, fp16, fp32", backward_a_values,
             QLT_BACKWARD_PRECISION_COUNT, "backward_precision",
             "precision of the input-gradient GEMMs (dX = dY W^T); fp32 is exact but slower"),
    ENUM_KEY("train.grad_checkpoint", train.grad_checkpoint, "none", "none, layer, auto", grad_checkpoint_values,
             QLT_GRAD_CHECKPOINT_COUNT, "gradient_checkpointing|activation_checkpointing",
             "recompute activations in backward: none, every layer, or auto (only when memory is short)"),
    BOOL_KEY("train.cuda_graph", train.cuda_graph, "false", "cuda_graphs",
             "capture the whole step as one CUDA graph and replay it (CUDA_GRAPH=1 also turns it on)"),
    BOOL_KEY("train.deterministic", train.deterministic, "false", "full_determinism",
             "bitwise-reproducible GPU steps (a resumed run continues exactly); the attention backward "
             "then runs without atomics (no measurable cost with cuDNN's attention; about 5% of a step with the "
             "own kernels)"),
    FLOAT_KEY("train.dequant_cache_gib", train.dequant_cache_gib, "0", "[0, inf)", "dequant_cache|weight_cache_gib",
              "GiB of memory that keep frozen NF4 weights dequantized from their first use on (bf16 on a GPU, float32 "
              "on the CPU) instead of dequantizing them before every use; same values, same losses; 0 = off (the "
              "QLoRA footprint). A 7B model needs ~12.5 GiB on a GPU for all of its weights; a larger value keeps "
              "what fits in the memory the activations leave"),
    ENUM_KEY("train.attention", train.attention, "auto", "auto, own, cudnn", attention_values,
             QLT_ATTENTION_IMPL_COUNT, "attn_implementation",
             "CUDA attention: auto = cuDNN's fused attention where it applies (libcudnn.so.9 loadable, at most 16 "
             "packed examples a row), else the own kernels; own = always the own kernels; cudnn = cuDNN's, and an "
             "error where it cannot run"),
    INT64_KEY("train.eval_every", train.eval_every, "0", "[0, inf)", "eval_steps",
              "evaluate every N steps; 0 = only at the end, when there is eval data"),
    BOOL_KEY("train.eval_at_start", train.eval_at_start, "false", "eval_on_start",
             "a fresh run with eval data also evaluates before its first step, so the end's eval loss has one to "
             "compare with (printed as before -> after)"),
    INT_KEY("train.early_stopping_patience", train.early_stopping_patience, "0", "[0, inf)",
            "patience",
            "end the run (checkpoint + final adapter) after this many evals in a row without the eval loss improving "
            "by train.early_stopping_min_delta over the best; 0 = off; needs eval data and train.eval_every > 0"),
    FLOAT_KEY("train.early_stopping_min_delta", train.early_stopping_min_delta, "0", "[0, inf)",
              "early_stopping_threshold",
              "how much lower than the best so far an eval loss must be to count as an improvement"),
    INT_KEY("train.log_every", train.log_every, "1", "[1, inf)", "logging_steps|log_steps",
            "print metrics to stderr every N steps (metrics.jsonl gets every step)"),
    INT_KEY("train.threads", train.threads, "0", "[0, inf)", "num_threads|cpu_threads",
            "threads for the CPU path (0 = all cores)"),
    BOOL_KEY("train.cpu_reference", train.cpu_reference, "false", "cpu_reference_ops",
             "CPU path: the reference ops (sums in double, scalar; what the float64 golden tests check, several "
             "times slower) instead of the default float32 ops through OpenBLAS"),
    FLOAT_KEY("train.dist_timeout_s", train.dist_timeout_s, "600", "(0, inf)", "ddp_timeout",
              "data parallel (docs/DISTRIBUTED.md): seconds the ranks wait for each other at the rendezvous and for a "
              "gradient all-reduce before the job ends with an error naming the rank"),

    STRING_KEY("output.dir", output.dir, "runs/demo", "output_dir|out_dir",
               "run directory: the effective config, logs, checkpoints and the final adapter"),
    INT64_KEY("output.save_every", output.save_every, "0", "[0, inf)", "save_steps",
              "save a checkpoint every N steps; 0 = only the final adapter"),
    INT_KEY("output.keep_last", output.keep_last, "0", "[0, inf)", "save_total_limit",
            "checkpoints to keep (older ones are deleted); 0 = keep them all"),
    BOOL_KEY("output.save_best", output.save_best, "false", "load_best_model_at_end",
             "after each eval whose loss is the lowest so far, save a full checkpoint as output.dir/best/ (never "
             "pruned by output.keep_last)"),
    BOOL_KEY("output.overwrite", output.overwrite, "false", "overwrite_output_dir",
             "a run from step 0 into an output.dir that holds an earlier run's checkpoints or final adapter: "
             "false = refuse, true = delete them first"),
    STRING_KEY("output.sample_prompt", output.sample_prompt, "", "sample_prompt",
               "a prompt the model answers (greedy; a user turn of the chat template when the tokenizer has one) "
               "before training and at the end, printed and written to output.dir/samples.jsonl; \"\" = none"),
    INT_KEY("output.sample_tokens", output.sample_tokens, "96", "[1, 4096]", "sample_max_new_tokens",
            "most new tokens of each sample answer"),
    BOOL_KEY("output.tensorboard", output.tensorboard, "false", "report_to_tensorboard",
             "also write the step and eval metrics as a TensorBoard events file "
             "(output.dir/events.out.tfevents.<time>.<host>)"),
};

#define SCHEMA_COUNT ((int64_t)(sizeof schema / sizeof schema[0]))

static const struct {
    const char *name, *hf_name;
    unsigned bit;
} targets[] = {
    {"q", "q_proj", QLT_TARGET_Q},          {"k", "k_proj", QLT_TARGET_K},
    {"v", "v_proj", QLT_TARGET_V},          {"o", "o_proj", QLT_TARGET_O},
    {"gate", "gate_proj", QLT_TARGET_GATE}, {"up", "up_proj", QLT_TARGET_UP},
    {"down", "down_proj", QLT_TARGET_DOWN},
};

int64_t qlt_cfg_count(void) { return SCHEMA_COUNT; }

const qlt_cfg_entry *qlt_cfg_at(int64_t i) {
    QLT_ASSERT(i >= 0 && i < SCHEMA_COUNT);
    return &schema[i];
}

int64_t qlt_config_key_count(void) { return SCHEMA_COUNT; }

const qlt_config_key *qlt_config_key_at(int64_t i) { return &qlt_cfg_at(i)->info; }

const qlt_cfg_entry *qlt_cfg_find(const char *name) {
    for (int64_t i = 0; i < SCHEMA_COUNT; i++)
        if (!strcmp(schema[i].info.name, name)) return &schema[i];
    return NULL;
}

const char *qlt_cfg_target_name(int bit) {
    QLT_ASSERT(bit >= 0 && bit < (int)(sizeof targets / sizeof targets[0]));
    return targets[bit].hf_name;
}

void *qlt_cfg_field(qlt_config *cfg, const qlt_cfg_entry *e) { return (char *)cfg + e->offset; }

const void *qlt_cfg_cfield(const qlt_config *cfg, const qlt_cfg_entry *e) {
    return (const char *)cfg + e->offset;
}

/* ---- words in '|' / ',' separated lists, sections ------------------------------------------------- */

/* Copies the i-th word of `list` (words separated by `sep`, spaces trimmed) into buf; 0 when there is none. */
static int word_at(const char *list, char sep, int i, char *buf, size_t size) {
    if (!list) return 0;
    const char *p = list;
    for (int k = 0; k < i; k++) {
        p = strchr(p, sep);
        if (!p) return 0;
        p++;
    }
    while (*p == ' ') p++;
    size_t n = strcspn(p, (char[]){sep, '\0'});
    while (n > 0 && p[n - 1] == ' ') n--;
    if (n >= size) n = size - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 1;
}

static const char *key_part(const qlt_cfg_entry *e) { return strchr(e->info.name, '.') + 1; }

static size_t section_len(const qlt_cfg_entry *e) { return (size_t)(key_part(e) - 1 - e->info.name); }

static int in_section(const qlt_cfg_entry *e, const char *section) {
    return strlen(section) == section_len(e) && !strncmp(e->info.name, section, section_len(e));
}

static int same_section(const qlt_cfg_entry *a, const qlt_cfg_entry *b) {
    return section_len(a) == section_len(b) && !strncmp(a->info.name, b->info.name, section_len(a));
}

int qlt_cfg_starts_section(int64_t i) { return i == 0 || !same_section(&schema[i - 1], &schema[i]); }

int qlt_cfg_is_section(const char *name) {
    for (int64_t i = 0; i < SCHEMA_COUNT; i++)
        if (in_section(&schema[i], name)) return 1;
    return 0;
}

/* ---- suggestions ------------------------------------------------------------------------------------ */

/* How many edits still read as a typo of a name this long. */
static int64_t typo_budget(const char *s) {
    size_t n = strlen(s);
    return n <= 3 ? 1 : n <= 6 ? 2 : 3;
}

/* The entry whose key (or one of its aliases) is nearest to `key` typed in `section` ("" = none), within
 * the typo budget; ties go to the same section, then to table order. */
static const qlt_cfg_entry *closest_key(const char *section, const char *key) {
    const qlt_cfg_entry *best = NULL;
    int64_t best_score = INT64_MAX;
    for (int64_t i = 0; i < SCHEMA_COUNT; i++) {
        const qlt_cfg_entry *e = &schema[i];
        int64_t d = qlt_edit_distance(key, key_part(e));
        char alias[64];
        for (int k = 0; word_at(e->aliases, '|', k, alias, sizeof alias); k++) {
            int64_t da = qlt_edit_distance(key, alias);
            if (da < d) d = da;
        }
        if (d > typo_budget(key)) continue;
        int64_t score = 2 * d + (in_section(e, section) ? 0 : 1);
        if (score < best_score) {
            best_score = score;
            best = e;
        }
    }
    return best;
}

/* Appends "a, b, c" (the sections, or the keys of one section) to buf. */
static void list_names(const char *section, char *buf, size_t size) {
    size_t used = strlen(buf);
    int first = 1;
    for (int64_t i = 0; i < SCHEMA_COUNT && used < size; i++) {
        const qlt_cfg_entry *e = &schema[i];
        if (section && !in_section(e, section)) continue;
        if (!section && !qlt_cfg_starts_section(i)) continue;
        int n = section ? snprintf(buf + used, size - used, "%s%s", first ? "" : ", ", key_part(e))
                        : snprintf(buf + used, size - used, "%s%.*s", first ? "" : ", ", (int)section_len(e),
                                   e->info.name);
        if (n < 0) break;
        used += (size_t)n;
        first = 0;
    }
}

void qlt_cfg_suggest_key(const char *name, char *buf, size_t size) {
    char section[64] = "";
    const char *dot = strchr(name, '.');
    const char *key = name;
    if (dot) {
        size_t n = (size_t)(dot - name) < sizeof section - 1 ? (size_t)(dot - name) : sizeof section - 1;
        memcpy(section, name, n);
        section[n] = '\0';
        key = dot + 1;
    }
    const qlt_cfg_entry *e = closest_key(section, key);
    if (e) {
        snprintf(buf, size, " (did you mean '%s'?)", e->info.name);
    } else if (qlt_cfg_is_section(section)) {
        snprintf(buf, size, " (valid keys in %s: ", section);
        list_names(section, buf, size);
        strncat(buf, ")", size - strlen(buf) - 1);
    } else {
        snprintf(buf, size, " (keys are written section.key; sections: ");
        list_names(NULL, buf, size);
        strncat(buf, ")", size - strlen(buf) - 1);
    }
}

void qlt_cfg_suggest_section(const char *name, char *buf, size_t size) {
    int64_t best_d = INT64_MAX, best_i = -1;
    for (int64_t i = 0; i < SCHEMA_COUNT; i++) {
        if (!qlt_cfg_starts_section(i)) continue;
        char section[64];
        snprintf(section, sizeof section, "%.*s", (int)section_len(&schema[i]), schema[i].info.name);
        int64_t d = qlt_edit_distance(name, section);
        if (d < best_d) {
            best_d = d;
            best_i = i;
        }
    }
    if (best_i >= 0 && best_d <= typo_budget(name)) {
        snprintf(buf, size, " (did you mean '%.*s'?)", (int)section_len(&schema[best_i]), schema[best_i].info.name);
        return;
    }
    /* A key written at the top level instead of inside its section. */
    const qlt_cfg_entry *e = closest_key("", name);
    if (e) {
        snprintf(buf, size, " (did you mean '%s'? put it under '%.*s:')", e->info.name, (int)section_len(e),
                 e->info.name);
        return;
    }
    snprintf(buf, size, " (valid sections: ");
    list_names(NULL, buf, size);
    strncat(buf, ")", size - strlen(buf) - 1);
}

/* ---- ranges ----------------------------------------------------------------------------------------- */

typedef struct range {
    double lo, hi;
    int lo_open, hi_open;
} range;

/* Reads "[lo, hi)" style text; "inf" is infinity. The table is fixed, so a bad range is a bug. */
static range parse_range(const char *text) {
    range r;
    char *end;
    QLT_ASSERT(text[0] == '[' || text[0] == '(');
    r.lo_open = text[0] == '(';
    r.lo = strtod(text + 1, &end);
    QLT_ASSERT(*end == ',');
    r.hi = strtod(end + 1, &end);
    QLT_ASSERT(*end == ']' || *end == ')');
    r.hi_open = *end == ')';
    return r;
}

int qlt_cfg_in_range(const qlt_cfg_entry *e, double v) {
    if (!e->info.range) return 1;
    if (isnan(v)) return 0;
    range r = parse_range(e->info.range);
    if (r.lo_open ? v <= r.lo : v < r.lo) return 0;
    if (r.hi_open ? v >= r.hi : v > r.hi) return 0;
    return 1;
}

void qlt_cfg_range_rule(const qlt_cfg_entry *e, char *buf, size_t size) {
    range r = parse_range(e->info.range);
    if (isinf(r.hi)) snprintf(buf, size, "must be %s %g", r.lo_open ? ">" : ">=", r.lo);
    else snprintf(buf, size, "must be in %s", e->info.range);
}

double qlt_cfg_number(const qlt_config *cfg, const qlt_cfg_entry *e, int index) {
    const void *p = qlt_cfg_cfield(cfg, e);
    switch (e->type) {
    case QLT_CFG_INT:
    case QLT_CFG_BOOL: return *(const int *)p;
    case QLT_CFG_INT64: return (double)*(const int64_t *)p;
    case QLT_CFG_UINT64: return (double)*(const uint64_t *)p;
    case QLT_CFG_FLOAT: return *(const float *)p;
    case QLT_CFG_FLOAT_PAIR: return ((const float *)p)[index];
    case QLT_CFG_TARGETS: return *(const unsigned *)p;
    default: return 0;
    }
}

void qlt_cfg_format_number(const qlt_config *cfg, const qlt_cfg_entry *e, int index, char *buf, size_t size) {
    const void *p = qlt_cfg_cfield(cfg, e);
    switch (e->type) {
    case QLT_CFG_INT:
    case QLT_CFG_BOOL: snprintf(buf, size, "%d", *(const int *)p); return;
    case QLT_CFG_INT64: snprintf(buf, size, "%" PRId64, *(const int64_t *)p); return;
    case QLT_CFG_UINT64: snprintf(buf, size, "%" PRIu64, *(const uint64_t *)p); return;
    case QLT_CFG_TARGETS: snprintf(buf, size, "%u", *(const unsigned *)p); return;
    default: break;
    }
    float v = (float)qlt_cfg_number(cfg, e, index);
    if (!isfinite(v)) {
        snprintf(buf, size, "null");
        return;
    }
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, size, "%.*g", digits, v);
        if (strtof(buf, NULL) == v) return;
    }
}

/* ---- reading values --------------------------------------------------------------------------------- */

/* Records "file:line: key: <what>, got <value>" (or "--set key=value: <what>" for an override). `got` is the
 * node the message describes and whose line it names; show_got = 0 leaves out ", got ...". */
static int value_fail(const qlt_cfg_where *w, const qlt_cfg_entry *e, const qlt_doc_node *got, int show_got,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int value_fail(const qlt_cfg_where *w, const qlt_cfg_entry *e, const qlt_doc_node *got, int show_got,
                      const char *fmt, ...) {
    char body[512], desc[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (!w->file) return qlt_fail("--set %s: %s", w->assignment, body);
    const char *tail = show_got ? qlt_doc_describe(got, desc, sizeof desc) : NULL;
    if (got->line > 0)
        return qlt_fail("%s:%lld: %s: %s%s%s", w->file, (long long)got->line, e->info.name, body,
                        tail ? ", got " : "", tail ? tail : "");
    return qlt_fail("%s: %s: %s%s%s", w->file, e->info.name, body, tail ? ", got " : "", tail ? tail : "");
}

/* Whole-string signed decimal integer: 0 = ok, 1 = not an integer, 2 = outside [lo, hi]. */
static int parse_integer(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    const char *p = s + (*s == '+' || *s == '-');
    if (!*p) return 1;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q)) return 1;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE || v < lo || v > hi) return 2;
    *out = v;
    return 0;
}

static int parse_unsigned(const char *s, uint64_t *out) {
    const char *p = s + (*s == '+' || *s == '-');
    if (!*p) return 1;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q)) return 1;
    if (*s == '-') return strspn(p, "0") == strlen(p) ? (*out = 0, 0) : 2;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno == ERANGE) return 2;
    *out = v;
    return 0;
}

/* Decimal numbers only (2e-4, 1.0, .5, -3): no hex, inf or nan, which strtod would also take. */
static int is_decimal(const char *s) {
    const char *p = s + (*s == '+' || *s == '-');
    size_t whole = strspn(p, "0123456789");
    p += whole;
    size_t frac = 0;
    if (*p == '.') {
        frac = strspn(p + 1, "0123456789");
        p += 1 + frac;
    }
    if (whole + frac == 0) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        p += *p == '+' || *p == '-';
        size_t exp = strspn(p, "0123456789");
        if (exp == 0) return 0;
        p += exp;
    }
    return *p == '\0';
}

/* 0 = ok, 1 = not a number, 2 = too large for a float. */
static int parse_float(const char *s, float *out) {
    if (!is_decimal(s)) return 1;
    double v = strtod(s, NULL);
    if (!isfinite(v) || fabs(v) > FLT_MAX) return 2;
    *out = (float)v;
    return 0;
}

static int parse_bool(const char *s, int *out) {
    static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return *out = 1, 0;
        if (!strcasecmp(s, no[i])) return *out = 0, 0;
    }
    return 1;
}

static int check_range(const qlt_cfg_where *w, const qlt_cfg_entry *e, const qlt_doc_node *node, double v) {
    if (qlt_cfg_in_range(e, v)) return 0;
    char rule[128];
    qlt_cfg_range_rule(e, rule, sizeof rule);
    return value_fail(w, e, node, 1, "%s", rule);
}

/* A scalar into a number field (int, int64, uint64, float, or one element of a float pair). */
static int apply_number(void *field, const qlt_cfg_entry *e, const qlt_doc_node *node, const qlt_cfg_where *w) {
    qlt_cfg_type type = e->type == QLT_CFG_FLOAT_PAIR ? QLT_CFG_FLOAT : e->type;
    const char *what = type == QLT_CFG_FLOAT ? "expected a number" : "expected an integer";
    if (node->kind != QLT_DOC_SCALAR) return value_fail(w, e, node, 1, "%s", what);
    const char *s = node->text;
    int rc;
    double v = 0;
    if (type == QLT_CFG_FLOAT) {
        float f = 0;
        rc = parse_float(s, &f);
        if (rc == 2) return value_fail(w, e, node, 1, "out of range for a 32-bit float");
        if (rc == 0) *(float *)field = f, v = f;
    } else if (type == QLT_CFG_UINT64) {
        uint64_t u = 0;
        rc = parse_unsigned(s, &u);
        if (rc == 2) return value_fail(w, e, node, 1, "out of range (0 to %" PRIu64 ")", UINT64_MAX);
        if (rc == 0) *(uint64_t *)field = u, v = (double)u;
    } else {
        int64_t lo = type == QLT_CFG_INT ? INT_MIN : INT64_MIN, hi = type == QLT_CFG_INT ? INT_MAX : INT64_MAX;
        int64_t i = 0;
        rc = parse_integer(s, lo, hi, &i);
        if (rc == 2) return value_fail(w, e, node, 1, "out of range (%" PRId64 " to %" PRId64 ")", lo, hi);
        if (rc == 0 && type == QLT_CFG_INT) *(int *)field = (int)i;
        if (rc == 0 && type == QLT_CFG_INT64) *(int64_t *)field = i;
        v = (double)i;
    }
    if (rc != 0) return value_fail(w, e, node, 1, "%s", what);
    return check_range(w, e, node, v);
}

static void set_string(char **field, const char *value) {
    free(*field);
    *field = qlt_xstrdup(value);
}

/* The value's text (any case) becomes its C enum value, here and only here. */
static int apply_enum(qlt_config *cfg, const qlt_cfg_entry *e, const qlt_doc_node *node, const qlt_cfg_where *w) {
    if (node->kind == QLT_DOC_SCALAR)
        for (int i = 0; i < e->info.value_count; i++)
            if (!strcasecmp(e->info.values[i].text, node->text)) {
                *(int *)qlt_cfg_field(cfg, e) = e->info.values[i].value;
                return 0;
            }
    return value_fail(w, e, node, 1, "expected one of %s", e->info.choices);
}

const char *qlt_cfg_enum_text(const qlt_cfg_entry *e, int value) {
    for (int i = 0; i < e->info.value_count; i++)
        if (e->info.values[i].value == value) return e->info.values[i].text;
    return NULL;
}

const char *qlt_config_enum_text(const char *key, int value) {
    const qlt_cfg_entry *e = qlt_cfg_find(key);
    QLT_ASSERT(e && e->type == QLT_CFG_ENUM);
    const char *text = qlt_cfg_enum_text(e, value);
    return text ? text : "?";
}

static int apply_paths(qlt_config *cfg, const qlt_cfg_entry *e, const qlt_doc_node *node, const qlt_cfg_where *w) {
    qlt_path_list *list = qlt_cfg_field(cfg, e);
    const qlt_doc_node *const *items = (const qlt_doc_node *const *)node->items;
    int64_t count = node->count;
    if (node->kind == QLT_DOC_SCALAR) {
        items = &node;
        count = node->text[0] ? 1 : 0;
    } else if (node->kind == QLT_DOC_NULL) {
        count = 0;
    } else if (node->kind != QLT_DOC_LIST) {
        return value_fail(w, e, node, 1, "expected a path or a list of paths");
    }
    if (count > QLT_MAX_PATHS) return value_fail(w, e, node, 0, "at most %d paths, got %lld", QLT_MAX_PATHS,
                                                 (long long)count);
    for (int64_t i = 0; i < count; i++) {
        if (items[i]->kind != QLT_DOC_SCALAR || !items[i]->text[0])
            return value_fail(w, e, items[i], 1, "expected a path (a non-empty string)");
    }
    for (int i = 0; i < list->count; i++) free(list->items[i]);
    for (int64_t i = 0; i < count; i++) list->items[i] = qlt_xstrdup(items[i]->text);
    list->count = (int)count;
    return 0;
}

/* The items of a list-valued key: a LIST as it is, a scalar split at commas (`q,v`, `0.9, 0.999`). */
static const qlt_doc_node *as_list(const qlt_doc_node *node, qlt_doc_node **owned) {
    *owned = NULL;
    if (node->kind == QLT_DOC_SCALAR) return *owned = qlt_doc_split_commas(node);
    return node;
}

static int apply_pair(qlt_config *cfg, const qlt_cfg_entry *e, const qlt_doc_node *node, const qlt_cfg_where *w) {
    qlt_doc_node *owned;
    const qlt_doc_node *list = as_list(node, &owned);
    float pair[2];
    int rc = 0;
    if (list->kind != QLT_DOC_LIST || list->count != 2)
        rc = value_fail(w, e, node, 1, "expected two numbers like [%s]", "0.9, 0.999");
    for (int i = 0; rc == 0 && i < 2; i++) rc = apply_number(&pair[i], e, list->items[i], w);
    qlt_doc_free(owned);
    if (rc == 0) memcpy(qlt_cfg_field(cfg, e), pair, sizeof pair);
    return rc;
}

int qlt_config_target_bits(const char *name, unsigned *bits) {
    if (!strcasecmp(name, "all-linear") || !strcasecmp(name, "all")) return *bits = QLT_TARGET_ALL, 0;
    /* Phi-3's fused modules (model/fused_proj.h) */
    if (!strcasecmp(name, "qkv_proj") || !strcasecmp(name, "qkv")) return *bits = QLT_TARGET_Q | QLT_TARGET_K | QLT_TARGET_V, 0;
    if (!strcasecmp(name, "gate_up_proj") || !strcasecmp(name, "gate_up")) return *bits = QLT_TARGET_GATE | QLT_TARGET_UP, 0;
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
        if (!strcasecmp(name, targets[i].name) || !strcasecmp(name, targets[i].hf_name))
            return *bits = targets[i].bit, 0;
    return -1;
}

static int apply_targets(qlt_config *cfg, const qlt_cfg_entry *e, const qlt_doc_node *node, const qlt_cfg_where *w) {
    qlt_doc_node *owned;
    const qlt_doc_node *list = as_list(node, &owned);
    unsigned all = 0;
    int rc = 0;
    if (list->kind != QLT_DOC_LIST)
        rc = value_fail(w, e, node, 1, "expected a list of q, k, v, o, gate, up, down (or their *_proj names), "
                                       "or all-linear");
    for (int64_t i = 0; rc == 0 && i < list->count; i++) {
        const qlt_doc_node *item = list->items[i];
        unsigned bits;
        if (item->kind != QLT_DOC_SCALAR || qlt_config_target_bits(item->text, &bits) != 0)
            rc = value_fail(w, e, item, 1, "expected q, k, v, o, gate, up, down, q_proj ... down_proj or all-linear");
        else all |= bits;
    }
    if (rc == 0 && all == 0) rc = value_fail(w, e, node, 0, "name at least one projection (e.g. [q, v] or all-linear)");
    qlt_doc_free(owned);
    if (rc == 0) *(unsigned *)qlt_cfg_field(cfg, e) = all;
    return rc;
}

int qlt_cfg_apply(qlt_config *cfg, const qlt_cfg_entry *e, const qlt_doc_node *value, const qlt_cfg_where *w) {
    void *field = qlt_cfg_field(cfg, e);
    switch (e->type) {
    case QLT_CFG_INT:
    case QLT_CFG_INT64:
    case QLT_CFG_UINT64:
    case QLT_CFG_FLOAT: return apply_number(field, e, value, w);
    case QLT_CFG_BOOL:
        if (value->kind != QLT_DOC_SCALAR || parse_bool(value->text, field) != 0)
            return value_fail(w, e, value, 1, "expected true or false (or yes/no, on/off, 1/0)");
        return 0;
    case QLT_CFG_STRING:
        if (value->kind == QLT_DOC_NULL) set_string(field, "");
        else if (value->kind == QLT_DOC_SCALAR) set_string(field, value->text);
        else return value_fail(w, e, value, 1, "expected a string");
        return 0;
    case QLT_CFG_ENUM: return apply_enum(cfg, e, value, w);
    case QLT_CFG_PATHS: return apply_paths(cfg, e, value, w);
    case QLT_CFG_FLOAT_PAIR: return apply_pair(cfg, e, value, w);
    case QLT_CFG_TARGETS: return apply_targets(cfg, e, value, w);
    }
    return qlt_fail("%s: internal error: unknown key type", e->info.name);
}

/* ---- whole-struct operations ------------------------------------------------------------------------ */

void qlt_config_copy(qlt_config *dst, const qlt_config *src) {
    memcpy(dst, src, sizeof *dst);
    for (int64_t i = 0; i < SCHEMA_COUNT; i++) {
        const qlt_cfg_entry *e = &schema[i];
        void *field = qlt_cfg_field(dst, e);
        if (e->type == QLT_CFG_STRING) {
            char **s = field;
            if (*s) *s = qlt_xstrdup(*s);
        } else if (e->type == QLT_CFG_PATHS) {
            qlt_path_list *list = field;
            for (int k = 0; k < list->count; k++) list->items[k] = qlt_xstrdup(list->items[k]);
        }
    }
}

void qlt_config_free(qlt_config *cfg) {
    for (int64_t i = 0; i < SCHEMA_COUNT; i++) {
        const qlt_cfg_entry *e = &schema[i];
        void *field = qlt_cfg_field(cfg, e);
        if (e->type == QLT_CFG_STRING) {
            char **s = field;
            free(*s);
            *s = NULL;
        } else if (e->type == QLT_CFG_PATHS) {
            qlt_path_list *list = field;
            for (int k = 0; k < list->count; k++) {
                free(list->items[k]);
                list->items[k] = NULL;
            }
            list->count = 0;
        }
    }
}

static int strings_differ(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") != 0; }

static int field_differs(const qlt_config *a, const qlt_config *b, const qlt_cfg_entry *e) {
    const void *fa = qlt_cfg_cfield(a, e), *fb = qlt_cfg_cfield(b, e);
    switch (e->type) {
    case QLT_CFG_INT:
    case QLT_CFG_BOOL:
    case QLT_CFG_ENUM: return *(const int *)fa != *(const int *)fb;
    case QLT_CFG_INT64: return *(const int64_t *)fa != *(const int64_t *)fb;
    case QLT_CFG_UINT64: return *(const uint64_t *)fa != *(const uint64_t *)fb;
    case QLT_CFG_FLOAT: return *(const float *)fa != *(const float *)fb;
    case QLT_CFG_FLOAT_PAIR: return memcmp(fa, fb, 2 * sizeof(float)) != 0;
    case QLT_CFG_TARGETS: return *(const unsigned *)fa != *(const unsigned *)fb;
    case QLT_CFG_STRING: return strings_differ(*(char *const *)fa, *(char *const *)fb);
    case QLT_CFG_PATHS: {
        const qlt_path_list *la = fa, *lb = fb;
        if (la->count != lb->count) return 1;
        for (int k = 0; k < la->count; k++)
            if (strings_differ(la->items[k], lb->items[k])) return 1;
        return 0;
    }
    }
    return 1;
}

const char *qlt_config_first_difference(const qlt_config *a, const qlt_config *b) {
    for (int64_t i = 0; i < SCHEMA_COUNT; i++)
        if (field_differs(a, b, &schema[i])) return schema[i].info.name;
    return NULL;
}
