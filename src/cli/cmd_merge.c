/* cmd_merge.c: `qlora-train merge --config FILE --adapter DIR --out DIR`: the run's base model with a trained
 * adapter folded in (src/model/merge.h), written as a Hugging Face model directory that transformers loads
 * as it is (sharded safetensors, config.json saying what it is, generation config and tokenizer files), or
 * as one GGUF file llama.cpp loads (src/model/gguf_export.h). The output is written under a temporary name
 * and renamed when complete; an existing non-empty --out is refused. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_config.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "formats/bnb_checkpoint.h"
#include "formats/gguf_write.h"
#include "formats/safetensors_shards.h"
#include "model/gguf_export.h"
#include "model/merge.h"

const qlt_cli_option qlt_merge_options[] = {
    QLT_CLI_OPT_CONFIG,
    QLT_CLI_OPT_SET,
    {"--adapter", "DIR", NULL, "the trained PEFT adapter to fold in (required; e.g. output.dir/final)"},
    {"--out", "PATH", NULL, "a new directory (or, with --format gguf, a new .gguf file) (required)"},
    {"--onto", "original|dequantized", "dequantized for an NF4 base, else original",
     "dequantized: W is the NF4 round trip of the base (what the adapter was trained against); original: W as "
     "stored in model.path"},
    {"--dtype", "bf16|f16|f32|q8_0", "the torch_dtype of model.path's config.json",
     "output dtype; q8_0 only with --format gguf"},
    {"--format", "safetensors|gguf", "safetensors",
     "safetensors: a directory transformers loads as it is; gguf: one .gguf file (llama / qwen2 / qwen3) llama.cpp "
     "loads"},
    {"--max-shard-size", "SIZE", "5GB", "largest safetensors shard (5GB, 500MB, ...)"},
    {NULL, NULL, NULL, NULL},
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: qlora-train merge --config FILE --adapter DIR --out PATH [--set section.key=value ...]\n"
            "                         [--onto original|dequantized] [--dtype bf16|f16|f32|q8_0]\n"
            "                         [--format safetensors|gguf] [--max-shard-size 5GB]\n\n"
            "Folds the LoRA adapter in DIR (PEFT format, e.g. output.dir/final) into the base model of the config's\n"
            "model.path: W' = W + scale * B A for every adapted projection, summed in double, rounded once.\n");
    qlt_cli_print_options(out, qlt_merge_options);
}

typedef struct merge_args {
    const char *adapter, *out, *onto, *dtype, *format;
    int64_t max_shard;
} merge_args;

/* Takes merge's own options out of argv; the rest (--config, --set) go to the shared config parser. */
static int parse_args(int argc, char **argv, merge_args *a, char **rest, int *n_rest, int *help) {
    memset(a, 0, sizeof *a);
    a->max_shard = (int64_t)5e9;
    *n_rest = 0;
    rest[(*n_rest)++] = argv[0];
    *help = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char **slot = !strcmp(s, "--adapter") ? &a->adapter : !strcmp(s, "--out") ? &a->out
                          : !strcmp(s, "--onto") ? &a->onto : !strcmp(s, "--dtype") ? &a->dtype
                          : !strcmp(s, "--format") ? &a->format : NULL;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            *help = 1;
            return 0;
        }
        if (slot || !strcmp(s, "--max-shard-size")) {
            if (i + 1 >= argc) return qlt_fail("%s needs a value", s);
            if (slot) *slot = argv[++i];
            else QLT_TRY(qlt_cli_parse_size(s, argv[++i], &a->max_shard));
            continue;
        }
        if (!strcmp(s, "--config") || !strcmp(s, "--set")) {
            rest[(*n_rest)++] = argv[i];
            if (i + 1 < argc) rest[(*n_rest)++] = argv[++i];
            continue;
        }
        return qlt_fail("merge: unknown option '%s' (see `qlora-train merge --help` for its options)", s);
    }
    if (!a->adapter) return qlt_fail("merge needs --adapter DIR: the trained adapter (e.g. output.dir/final)");
    if (!a->out) return qlt_fail("merge needs --out PATH: a new directory (or, with --format gguf, a new .gguf file)");
    if (a->format && strcmp(a->format, "safetensors") && strcmp(a->format, "gguf"))
        return qlt_fail("--format '%s': expected safetensors or gguf", a->format);
    if (a->onto && strcmp(a->onto, "original") && strcmp(a->onto, "dequantized"))
        return qlt_fail("--onto '%s': expected original or dequantized", a->onto);
    return 0;
}

/* The dtype config.json declares (torch_dtype, or transformers 5's dtype): "bf16", "f16" or "f32". */
static const char *declared_dtype(const cJSON *cfg) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(cfg, "torch_dtype");
    if (!cJSON_IsString(d)) d = cJSON_GetObjectItemCaseSensitive(cfg, "dtype");
    if (cJSON_IsString(d) && !strcmp(d->valuestring, "float32")) return "f32";
    if (cJSON_IsString(d) && !strcmp(d->valuestring, "float16")) return "f16";
    return "bf16";
}

static int parse_dtype(const char *s, int gguf, qlt_dtype *dt, int *q8) {
    *q8 = 0;
    if (!strcmp(s, "bf16")) *dt = QLT_DTYPE_BF16;
    else if (!strcmp(s, "f16")) *dt = QLT_DTYPE_F16;
    else if (!strcmp(s, "f32")) *dt = QLT_DTYPE_F32;
    else if (!strcmp(s, "q8_0") && gguf) *q8 = 1, *dt = QLT_DTYPE_F32;
    else if (!strcmp(s, "q8_0")) return qlt_fail("--dtype q8_0 is a GGUF type: add --format gguf, or use bf16, f16 or f32");
    else return qlt_fail("--dtype '%s': expected bf16, f16 or f32%s", s, gguf ? " (or q8_0)" : "");
    return 0;
}

static const char *torch_name(qlt_dtype dt) {
    return dt == QLT_DTYPE_BF16 ? "bfloat16" : dt == QLT_DTYPE_F16 ? "float16" : "float32";
}

static int write_json(const char *path, cJSON *root) {
    char *text = cJSON_Print(root);
    size_t n = strlen(text);
    text = qlt_xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    int rc = qlt_write_file_atomic(path, text, n + 1);
    free(text);
    return rc;
}

/* What the output is, for its config.json. */
static cJSON *merge_note(const qlt_merge *m, const char *adapter, const char *dtype) {
    cJSON *note = cJSON_CreateObject();
    cJSON_AddStringToObject(note, "onto", m->opts.onto == QLT_MERGE_ONTO_DEQUANTIZED ? "dequantized" : "original");
    cJSON_AddStringToObject(note, "adapter", adapter);
    cJSON_AddStringToObject(note, "base", m->model_dir);
    cJSON_AddStringToObject(note, "dtype", dtype);
    cJSON_AddNumberToObject(note, "r", m->r);
    cJSON_AddNumberToObject(note, "lora_alpha", m->alpha);
    cJSON_AddBoolToObject(note, "use_rslora", m->rslora);
    cJSON_AddNumberToObject(note, "projections_merged", m->n_merged);
    if (m->opts.onto == QLT_MERGE_ONTO_DEQUANTIZED) {
        if (m->bnb) cJSON_AddStringToObject(note, "nf4", "the bitsandbytes checkpoint's own");
        else cJSON_AddNumberToObject(note, "nf4_blocksize", m->opts.nf4_blocksize);
        if (!m->bnb) cJSON_AddBoolToObject(note, "nf4_double_quant", m->opts.double_quant);
    }
    return note;
}

/* config.json: the source's, with the output dtype, no quantization_config, and the merge's note; and
 * generation_config.json when the source has none (bos / eos from config.json). */
static int write_configs(const qlt_merge *m, cJSON *cfg, const char *dir, qlt_dtype dt, const char *adapter,
                         const char *dtype_name) {
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "quantization_config");
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "_pre_quantization_dtype");
    int has_dtype = cJSON_HasObjectItem(cfg, "dtype");
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "torch_dtype");
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "dtype");
    cJSON_AddStringToObject(cfg, "torch_dtype", torch_name(dt));
    if (has_dtype) cJSON_AddStringToObject(cfg, "dtype", torch_name(dt));
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "qlora_train_merge");
    cJSON_AddItemToObject(cfg, "qlora_train_merge", merge_note(m, adapter, dtype_name));
    char *path = qlt_path_join(dir, "config.json");
    int rc = write_json(path, cfg);
    free(path);
    char *src_gen = qlt_path_join(m->model_dir, "generation_config.json");
    if (rc == 0 && !qlt_file_exists(src_gen)) {
        cJSON *gen = cJSON_CreateObject();
        cJSON_AddTrueToObject(gen, "_from_model_config");
        static const char *const keys[] = {"bos_token_id", "eos_token_id", "pad_token_id"};
        for (int k = 0; k < 3; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, keys[k]);
            if (v && !cJSON_IsNull(v)) cJSON_AddItemToObject(gen, keys[k], cJSON_Duplicate(v, 1));
        }
        path = qlt_path_join(dir, "generation_config.json");
        rc = write_json(path, gen);
        free(path);
        cJSON_Delete(gen);
    }
    free(src_gen);
    return rc;
}

static int write_safetensors(const qlt_merge *m, const char *dir, qlt_dtype dt, int64_t max_shard) {
    qlt_st_shards s;
    qlt_st_shards_init(&s, dir, max_shard);
    int rc = 0;
    for (int i = 0; i < m->n_tensors && rc == 0; i++) {
        qlt_dtype odt = qlt_merge_out_dtype(m, i, dt);
        void *buf = qlt_xmalloc((size_t)qlt_merge_numel(m, i) * qlt_dtype_size(odt) + 1);
        rc = qlt_merge_read(m, i, dt, buf);
        if (rc == 0) rc = qlt_st_shards_add(&s, m->tensors[i].name, odt, m->tensors[i].ndim, m->tensors[i].shape, buf);
        free(buf);
    }
    if (rc == 0) rc = qlt_st_shards_finish(&s);
    qlt_st_shards_free(&s);
    return rc;
}

/* A directory holding anything but "." and "..". */
static int dir_has_entries(const char *path) {
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d))) any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return any;
}

/* The tokenizer.json the GGUF file carries: model.path's, else data.tokenizer. Heap, or NULL with qlt_fail. */
static char *gguf_tokenizer(const qlt_config *cfg, const char *model_dir) {
    char *path = qlt_path_join(model_dir, "tokenizer.json");
    if (qlt_file_exists(path)) return path;
    free(path);
    if (cfg->data.tokenizer && cfg->data.tokenizer[0]) return qlt_xstrdup(cfg->data.tokenizer);
    qlt_fail("%s has no tokenizer.json, and a GGUF file carries its tokenizer: set data.tokenizer to the model's "
             "tokenizer.json", model_dir);
    return NULL;
}

static int run_merge(const qlt_config *cfg, const merge_args *a) {
    const char *path = cfg->model.path;
    if (!path[0] || !strncmp(path, "random:", 7))
        return qlt_fail("model.path '%s' holds no stored weights to merge into: set it to the Hugging Face model "
                        "directory the adapter was trained on", path);
    int gguf = a->format && !strcmp(a->format, "gguf");
    if (qlt_file_exists(a->out) || (gguf && qlt_dir_exists(a->out)))
        return qlt_fail("--out %s already exists: give a new %s", a->out, gguf ? ".gguf file name" : "directory");
    if (qlt_dir_exists(a->out) && dir_has_entries(a->out))
        return qlt_fail("--out %s is a directory that is not empty: give a new or empty directory", a->out);

    char *cfg_path = qlt_path_join(path, "config.json"), *text = NULL;
    int rc = qlt_read_file(cfg_path, &text, NULL);
    cJSON *src_cfg = rc == 0 ? cJSON_Parse(text) : NULL;
    free(text);
    if (rc == 0 && !cJSON_IsObject(src_cfg)) rc = qlt_fail("%s: not a JSON object", cfg_path);
    free(cfg_path);
    const char *dtype_name = a->dtype ? a->dtype : src_cfg ? declared_dtype(src_cfg) : "bf16";
    qlt_dtype dt = QLT_DTYPE_BF16;
    int q8 = 0;
    if (rc == 0) rc = parse_dtype(dtype_name, gguf, &dt, &q8);

    qlt_merge_opts mo = {.onto = QLT_MERGE_ONTO_ORIGINAL, .double_quant = cfg->model.double_quant};
    int nf4 = cfg->model.quant == QLT_QUANT_NF4;
    qlt_bnb_config bc;
    int bnb = rc == 0 ? qlt_bnb_detect(path, &bc) : 0;
    if (bnb < 0) rc = -1;
    if (a->onto) mo.onto = !strcmp(a->onto, "dequantized") ? QLT_MERGE_ONTO_DEQUANTIZED : QLT_MERGE_ONTO_ORIGINAL;
    else if (nf4 || bnb == 1) mo.onto = QLT_MERGE_ONTO_DEQUANTIZED;
    if (rc == 0 && mo.onto == QLT_MERGE_ONTO_DEQUANTIZED && !nf4 && bnb != 1)
        rc = qlt_fail("--onto dequantized: the run's base was not NF4 (model.quant: none), so the adapter was trained "
                      "on the original weights: use --onto original, or --set model.quant=nf4 if it ran with nf4");
    mo.nf4_blocksize = nf4 ? cfg->model.nf4_blocksize : 0;

    qlt_merge m;
    int opened = 0;
    if (rc == 0) rc = qlt_merge_open(&m, path, a->adapter, &mo);
    if (rc == 0) opened = 1;
    if (rc == 0 && gguf && qlt_model_fused(&m.cfg))
        rc = qlt_fail("merge --format gguf: %s's fused qkv_proj / gate_up_proj are not written as GGUF here; use "
                      "--format safetensors (llama.cpp's convert_hf_to_gguf.py converts that directory)", m.cfg.arch_name);
    char *tok = NULL;
    if (rc == 0 && gguf) tok = gguf_tokenizer(cfg, path);
    if (rc == 0 && gguf && !tok) rc = -1;

    char *tmp = NULL;
    if (rc == 0) {
        size_t n = strlen(a->out) + 32;
        tmp = qlt_xmalloc(n);
        snprintf(tmp, n, "%s.tmp-%d", a->out, (int)getpid());
        if (gguf) {
            qlt_gguf_export_opts eo = {.type = q8 ? QLT_GGUF_Q8_0 : dt == QLT_DTYPE_BF16 ? QLT_GGUF_BF16
                                              : dt == QLT_DTYPE_F16 ? QLT_GGUF_F16 : QLT_GGUF_F32,
                                       .tokenizer_json = tok};
            rc = qlt_gguf_export(&m, a->out, &eo);
        } else {
            rc = qlt_mkdirs(tmp);
            if (rc == 0) rc = write_safetensors(&m, tmp, dt, a->max_shard);
            if (rc == 0) rc = qlt_cli_copy_model_files(path, tmp);
            if (rc == 0) rc = write_configs(&m, src_cfg, tmp, dt, a->adapter, dtype_name);
            if (rc == 0) rc = qlt_commit_dir(tmp, a->out);
            if (rc != 0 && qlt_dir_exists(tmp)) {
                char keep[1024];
                snprintf(keep, sizeof keep, "%s", qlt_error());
                qlt_remove_tree(tmp);
                qlt_fail("%s", keep);
            }
        }
    }
    if (rc == 0)
        fprintf(stderr, "merge: %d projections merged (onto %s, r %d, alpha %g%s), %d tensors in %s -> %s\n", m.n_merged,
                mo.onto == QLT_MERGE_ONTO_DEQUANTIZED ? "dequantized" : "original", m.r, m.alpha,
                m.rslora ? ", rsLoRA" : "", m.n_tensors, dtype_name, a->out);
    free(tmp);
    free(tok);
    if (opened) qlt_merge_close(&m);
    cJSON_Delete(src_cfg);
    return rc;
}

int qlt_cmd_merge(int argc, char **argv) {
    merge_args a;
    char **rest = qlt_xcalloc((size_t)argc + 1, sizeof *rest);
    int n_rest, help;
    if (parse_args(argc, argv, &a, rest, &n_rest, &help) != 0) {
        free(rest);
        return qlt_cli_report_error();
    }
    char *out = a.out ? qlt_xstrdup(a.out) : NULL; /* "dir/" names dir: its temporary is a sibling, not inside */
    for (size_t n = out ? strlen(out) : 0; n > 1 && out[n - 1] == '/'; n--) out[n - 1] = '\0';
    a.out = out;
    if (help) {
        free(rest);
        free(out);
        usage(stdout);
        return 0;
    }
    qlt_cli_args args;
    qlt_config cfg;
    int rc = qlt_cli_load_config("merge", n_rest, rest, qlt_merge_options, &args, &cfg);
    if (rc == 0) rc = run_merge(&cfg, &a);
    qlt_config_free(&cfg);
    free(rest);
    free(out);
    return rc == 0 ? 0 : qlt_cli_report_error();
}
