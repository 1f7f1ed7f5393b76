/* cmd_quantize.c: `qlora-train quantize MODEL_DIR OUT_DIR` writes a bitsandbytes 4-bit NF4 checkpoint
 * (the tensors transformers + bitsandbytes save, and config.json with quantization_config) that
 * transformers loads, and that qlora-train loads without quantizing again.
 *
 * Streams tensor by tensor: each linear weight (self_attn q/k/v/o_proj, mlp gate/up/down_proj; Phi-3's fused
 * qkv_proj / gate_up_proj) is read
 * from the mmapped input, quantized, and added to the current output shard; every other tensor (embeddings,
 * norms, lm_head, biases) is copied unchanged. A shard is written once it passes --max-shard-size, so host
 * memory stays about one shard. Everything is written into OUT_DIR.tmp-<pid> and renamed at the end. */
#include <cjson/cJSON.h>
#include <errno.h>
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
#include "formats/safetensors.h"
#include "formats/safetensors_shards.h"
#include "nf4/nf4.h"

const qlt_cli_option qlt_quantize_options[] = {
    {"--blocksize", "N", "64", "weights per NF4 block (a power of two from 32 to 4096)"},
    {"--no-double-quant", NULL, "double quantization on", "keep the NF4 absmax scales in float32"},
    {"--max-shard-size", "SIZE", "5GB", "largest safetensors shard (5GB, 500MB, ...)"},
    {NULL, NULL, NULL, NULL},
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: qlora-train quantize MODEL_DIR OUT_DIR [--blocksize 64] [--no-double-quant]\n"
            "                            [--max-shard-size 5GB]\n\n"
            "Writes OUT_DIR: the model with every linear layer (q/k/v/o/gate/up/down_proj) in bitsandbytes'\n"
            "4-bit NF4 format (double quantization on by default), other tensors unchanged, config.json with\n"
            "quantization_config, and the tokenizer files. transformers + bitsandbytes load it; so does\n"
            "qlora-train (model.path: OUT_DIR, model.quant: nf4).\n");
    qlt_cli_print_options(out, qlt_quantize_options);
}

static const char *const linear_suffixes[] = {
    ".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight",
    ".self_attn.o_proj.weight", ".mlp.gate_proj.weight",    ".mlp.up_proj.weight",
    ".mlp.down_proj.weight",
    ".self_attn.qkv_proj.weight", ".mlp.gate_up_proj.weight", /* Phi-3's fused projections, quantized whole */
};

static int is_linear_weight(const qlt_st_tensor *t) {
    size_t n = strlen(t->name);
    for (size_t i = 0; i < sizeof linear_suffixes / sizeof *linear_suffixes; i++) {
        size_t m = strlen(linear_suffixes[i]);
        if (n > m && strcmp(t->name + n - m, linear_suffixes[i]) == 0)
            return t->ndim == 2 && (t->dtype == QLT_DTYPE_F32 || t->dtype == QLT_DTYPE_F16 || t->dtype == QLT_DTYPE_BF16);
    }
    return 0;
}

static const char *config_dtype(const cJSON *cfg) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(cfg, "torch_dtype");
    if (!cJSON_IsString(d)) d = cJSON_GetObjectItemCaseSensitive(cfg, "dtype");
    if (cJSON_IsString(d) && (!strcmp(d->valuestring, "bfloat16") || !strcmp(d->valuestring, "float16")))
        return d->valuestring;
    return "float32";
}

/* config.json + quantization_config as transformers' BitsAndBytesConfig.to_dict() writes it. */
static int write_config(const char *in_dir, const char *out_dir, int double_quant) {
    char *path = qlt_path_join(in_dir, "config.json"), *text = NULL;
    size_t len;
    if (qlt_read_file(path, &text, &len) != 0) {
        free(path);
        return -1;
    }
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    if (!cfg || !cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        int rc = qlt_fail("%s: not a JSON object", path);
        free(path);
        return rc;
    }
    free(path);
    cJSON *qc = cJSON_CreateObject();
    cJSON_AddTrueToObject(qc, "_load_in_4bit");
    cJSON_AddFalseToObject(qc, "_load_in_8bit");
    cJSON_AddStringToObject(qc, "bnb_4bit_compute_dtype", config_dtype(cfg));
    cJSON_AddStringToObject(qc, "bnb_4bit_quant_storage", "uint8");
    cJSON_AddStringToObject(qc, "bnb_4bit_quant_type", "nf4");
    cJSON_AddBoolToObject(qc, "bnb_4bit_use_double_quant", double_quant);
    cJSON_AddFalseToObject(qc, "llm_int8_enable_fp32_cpu_offload");
    cJSON_AddFalseToObject(qc, "llm_int8_has_fp16_weight");
    cJSON_AddNullToObject(qc, "llm_int8_skip_modules");
    cJSON_AddRawToObject(qc, "llm_int8_threshold", "6.0");
    cJSON_AddTrueToObject(qc, "load_in_4bit");
    cJSON_AddFalseToObject(qc, "load_in_8bit");
    cJSON_AddStringToObject(qc, "quant_method", "bitsandbytes");
    cJSON_AddItemToObject(cfg, "quantization_config", qc);
    char *out = cJSON_Print(cfg);
    size_t n = strlen(out);
    out = qlt_xrealloc(out, n + 2);
    out[n] = '\n';
    out[n + 1] = 0;
    char *opath = qlt_path_join(out_dir, "config.json");
    int rc = qlt_write_file_atomic(opath, out, n + 1);
    free(opath);
    free(out);
    cJSON_Delete(cfg);
    return rc;
}

static int quantize_dir(const char *in_dir, const char *tmp_dir, int blocksize, int double_quant, int64_t max_shard,
                        int *n_quantized) {
    qlt_bnb_config bc;
    int q = qlt_bnb_detect(in_dir, &bc);
    if (q < 0) return -1;
    if (q == 1) return qlt_fail("%s is already a bitsandbytes 4-bit checkpoint: nothing to quantize", in_dir);
    qlt_st_dir d;
    QLT_TRY(qlt_st_dir_open(&d, in_dir));
    qlt_st_shards s;
    qlt_st_shards_init(&s, tmp_dir, max_shard);
    int rc = 0;
    *n_quantized = 0;
    for (int fi = 0; fi < d.n_files && rc == 0; fi++) {
        const qlt_st_file *f = &d.files[fi];
        for (int ti = 0; ti < f->n_tensors && rc == 0; ti++) {
            const qlt_st_tensor *t = &f->tensors[ti];
            if (!is_linear_weight(t)) {
                rc = qlt_st_shards_add(&s, t->name, t->dtype, t->ndim, t->shape, t->data);
                continue;
            }
            qlt_nf4 nf;
            if (qlt_nf4_alloc_host(&nf, t->numel, blocksize, double_quant) != 0) {
                rc = qlt_fail_context("%s: tensor '%s'", f->path, t->name);
                break;
            }
            qlt_nf4_quantize(&nf, t->data, t->dtype);
            char module[512];
            snprintf(module, sizeof module, "%.*s", (int)(strlen(t->name) - strlen(".weight")), t->name);
            qlt_bnb_write_module(&s.w, module, &nf, t->shape, t->ndim, t->dtype);
            qlt_nf4_free_host(&nf);
            (*n_quantized)++;
            rc = qlt_st_shards_account(&s, qlt_nf4_bytes(t->numel, blocksize, double_quant));
        }
    }
    if (rc == 0) rc = qlt_st_shards_finish(&s);
    qlt_st_shards_free(&s);
    qlt_st_dir_close(&d);
    return rc;
}

int qlt_cmd_quantize(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL};
    int npos = 0, blocksize = QLT_NF4_DEFAULT_BLOCKSIZE, double_quant = 1;
    int64_t max_shard = (int64_t)5e9;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--blocksize") && i + 1 < argc) {
            blocksize = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--no-double-quant")) {
            double_quant = 0;
        } else if (!strcmp(argv[i], "--max-shard-size") && i + 1 < argc) {
            if (qlt_cli_parse_size("--max-shard-size", argv[++i], &max_shard) != 0) return qlt_cli_report_error();
        } else if (argv[i][0] == '-' || npos == 2) {
            fprintf(stderr, "qlora-train: error: quantize: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos != 2) {
        usage(stderr);
        return 2;
    }
    if (qlt_nf4_check_blocksize(blocksize) != 0) return qlt_cli_report_error();
    const char *in_dir = pos[0], *out_dir = pos[1];
    if (qlt_dir_exists(out_dir) || qlt_file_exists(out_dir)) {
        qlt_fail("%s already exists: give a new directory for the quantized model", out_dir);
        return qlt_cli_report_error();
    }
    char tmp_dir[4096];
    snprintf(tmp_dir, sizeof tmp_dir, "%s.tmp-%d", out_dir, (int)getpid());
    if (qlt_mkdirs(tmp_dir) != 0) return qlt_cli_report_error();
    int n_quantized = 0;
    int rc = quantize_dir(in_dir, tmp_dir, blocksize, double_quant, max_shard, &n_quantized);
    if (rc == 0) rc = write_config(in_dir, tmp_dir, double_quant);
    if (rc == 0) rc = qlt_cli_copy_model_files(in_dir, tmp_dir);
    if (rc == 0) rc = qlt_commit_dir(tmp_dir, out_dir);
    if (rc != 0) {
        qlt_remove_tree(tmp_dir);
        return qlt_cli_report_error();
    }
    fprintf(stderr, "quantize: %d linear layers in NF4 (blocksize %d, double quant %s) -> %s\n", n_quantized,
            blocksize, double_quant ? "on" : "off", out_dir);
    return 0;
}
