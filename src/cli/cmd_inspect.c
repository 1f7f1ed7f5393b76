/* cmd_inspect.c: `qlora-train inspect MODEL_DIR [--check]`: architecture, parameter counts, every tensor,
 * bytes per dtype, and what the frozen base takes in NF4 (with and without double quantization). Reads
 * headers only (the files are mmapped, never loaded); --check also reads every floating-point value and
 * names the tensors holding NaN or infinity (a checkpoint saved from a diverged run trains to a NaN loss).
 * A .gguf file is described by cmd_inspect_gguf.c. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "formats/safetensors.h"
#include "model/gemma_config.h"
#include "model/fused_proj.h"
#include "model/longrope.h"
#include "model/model_config.h"
#include "nf4/nf4.h"

/* Where a tensor's name puts it: 0 = not part of a projection weight; 1 = a projection weight
 * (`...q_proj.weight`, what NF4 quantizes; embeddings, norms and lm_head stay as stored); 2 = a part of
 * one in a bitsandbytes 4-bit checkpoint (`...q_proj.weight.absmax`, `.quant_map`, `.quant_state...`). */
static int linear_part(const qlt_st_tensor *t) {
    static const char *suffixes[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                                     "gate_proj.weight", "up_proj.weight", "down_proj.weight"};
    size_t n = strlen(t->name);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t l = strlen(suffixes[i]);
        if (n > l && strcmp(t->name + n - l, suffixes[i]) == 0) return 1;
        const char *at = strstr(t->name, suffixes[i]);
        if (at && at[l] == '.') return 2;
    }
    return 0;
}

static double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

/* --check: every floating-point value of the directory's tensors; 0 when all are finite */
static int check_values(const qlt_st_dir *d) {
    int64_t n_float = 0, n_bad = 0;
    for (int f = 0; f < d->n_files; f++) {
        for (int i = 0; i < d->files[f].n_tensors; i++) {
            const qlt_st_tensor *t = &d->files[f].tensors[i];
            if (!qlt_dtype_is_float(t->dtype)) continue;
            n_float++;
            int64_t nan, inf, first;
            qlt_st_count_nonfinite(t, &nan, &inf, &first);
            if (nan + inf == 0) continue;
            n_bad++;
            printf("check: %s: %lld NaN, %lld infinite (first at element %lld of %lld)\n", t->name, (long long)nan,
                   (long long)inf, (long long)first, (long long)t->numel);
        }
    }
    if (n_bad)
        return qlt_fail("inspect --check: %lld of %lld floating-point tensors hold NaN or infinite values (listed "
                        "above): training from this checkpoint gives a NaN loss; use an intact copy",
                        (long long)n_bad, (long long)n_float);
    printf("check: every value of the %lld floating-point tensors is finite\n", (long long)n_float);
    return 0;
}

const qlt_cli_option qlt_inspect_options[] = {
    {"--check", NULL, "off",
     "also read every floating-point value and name the tensors holding NaN or infinity (exit status 1 if any)"},
    {NULL, NULL, NULL, NULL},
};

int qlt_cmd_inspect(int argc, char **argv) {
    int check = 0;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: qlora-train inspect MODEL_DIR|FILE.gguf [--check]\n\nPrints the architecture, parameter "
                   "counts, tensors, bytes per dtype and the NF4 footprint of a Hugging Face model directory or a "
                   "llama.cpp GGUF file.\n");
            qlt_cli_print_options(stdout, qlt_inspect_options);
            return 0;
        }
        if (strcmp(argv[i], "--check") == 0) check = 1;
        else if (!dir && argv[i][0] != '-') dir = argv[i];
        else {
            fprintf(stderr, "qlora-train: error: inspect: unexpected argument '%s' (usage: qlora-train inspect "
                            "MODEL_DIR [--check])\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "usage: qlora-train inspect MODEL_DIR [--check]\n");
        return 2;
    }
    size_t len = strlen(dir);
    if (qlt_file_exists(dir) || (len > 5 && strcmp(dir + len - 5, ".gguf") == 0)) return qlt_cmd_inspect_gguf(dir, check);
    qlt_model_config mc;
    if (qlt_model_config_load(&mc, dir) != 0) return qlt_cli_report_error();
    printf("model: %s\n", dir);
    printf("architecture: %s  layers %d  hidden %d  heads %d / kv %d  head_dim %d  intermediate %d  vocab %d\n",
           mc.arch_name, mc.n_layers, mc.hidden, mc.n_heads, mc.n_kv_heads, mc.head_dim, mc.intermediate, mc.vocab);
    printf("rope: theta %g%s  rms_eps %g  tied embeddings: %s  qkv bias: %s  qk norm: %s\n", mc.rope_theta,
           mc.rope_type == QLT_ROPE_LLAMA3 ? " (llama3 scaling)" : mc.rope_type == QLT_ROPE_LONGROPE ? " (longrope)" : "", mc.rms_eps, mc.tie_word_embeddings ? "yes" : "no",
           mc.attention_bias ? "yes" : "no", mc.qk_norm ? "yes" : "no");
    char attn[160];
    qlt_model_describe_attention(&mc, attn, sizeof attn);
    printf("attention: %s\n", attn);
    char gemma[1024];
    qlt_gemma_describe(&mc, gemma, sizeof gemma); /* Gemma 2 / 3: what its layer adds */
    if (gemma[0]) printf("%s\n", gemma);
    char extra[512];
    qlt_longrope_describe(&mc, extra, sizeof extra);
    if (extra[0]) printf("rotary: %s\n", extra);
    qlt_fused_describe(&mc, extra, sizeof extra);
    if (extra[0]) printf("fused: %s\n", extra);
    printf("parameters (from config): %lld total, %lld in linear layers\n", (long long)qlt_model_total_params(&mc),
           (long long)qlt_model_linear_params(&mc));
    qlt_st_dir d;
    if (qlt_st_dir_open(&d, dir) != 0) {
        printf("(no safetensors files: %s)\n", qlt_error());
        return 0;
    }
    int64_t bytes_by_dtype[QLT_DTYPE_COUNT] = {0}, count_by_dtype[QLT_DTYPE_COUNT] = {0};
    int64_t total_bytes = 0, linear_bytes = 0, nf4_bytes = 0, nf4_dq_bytes = 0, n_tensors = 0, n_params = 0;
    int prequantized = 0; /* a bitsandbytes 4-bit checkpoint: its linear layers are NF4 already */
    printf("\ntensors:\n");
    for (int f = 0; f < d.n_files; f++) {
        for (int i = 0; i < d.files[f].n_tensors; i++) {
            const qlt_st_tensor *t = &d.files[f].tensors[i];
            char shape[96];
            qlt_st_format_shape(shape, sizeof shape, t->ndim, t->shape);
            printf("  %-60s %-5s [%s]\n", t->name, qlt_dtype_name(t->dtype), shape);
            bytes_by_dtype[t->dtype] += (int64_t)t->nbytes;
            count_by_dtype[t->dtype]++;
            total_bytes += (int64_t)t->nbytes;
            n_tensors++;
            n_params += t->numel;
            const int part = linear_part(t);
            if (part) linear_bytes += (int64_t)t->nbytes;
            if (part == 1 && t->dtype == QLT_DTYPE_U8) prequantized = 1; /* packed 4-bit codes */
            if (part == 1 && t->ndim == 2) {
                nf4_bytes += qlt_nf4_bytes(t->numel, 64, 0);
                nf4_dq_bytes += qlt_nf4_bytes(t->numel, 64, 1);
            } else {
                nf4_bytes += (int64_t)t->nbytes;
                nf4_dq_bytes += (int64_t)t->nbytes;
            }
        }
    }
    printf("\n%lld tensors in %d file(s), %lld parameters, %.3f GiB\n", (long long)n_tensors, d.n_files,
           (long long)n_params, gib((double)total_bytes));
    for (int t = 0; t < QLT_DTYPE_COUNT; t++)
        if (count_by_dtype[t])
            printf("  %-5s %6lld tensors  %14lld bytes  (%.3f GiB)\n", qlt_dtype_name((qlt_dtype)t),
                   (long long)count_by_dtype[t], (long long)bytes_by_dtype[t], gib((double)bytes_by_dtype[t]));
    if (prequantized) {
        printf("linear layers: %lld bytes (%.3f GiB) as stored, already NF4 (a bitsandbytes 4-bit checkpoint; with "
               "their quantization state); the whole model loads as stored\n",
               (long long)linear_bytes, gib((double)linear_bytes));
    } else {
        printf("linear layers: %lld bytes (%.3f GiB) as stored\n", (long long)linear_bytes, gib((double)linear_bytes));
        printf("NF4 (block 64) whole model: %lld bytes (%.3f GiB); with double quantization: %lld bytes (%.3f GiB)\n",
               (long long)nf4_bytes, gib((double)nf4_bytes), (long long)nf4_dq_bytes, gib((double)nf4_dq_bytes));
        printf("NF4 + double quant, linear layers only: %lld bytes (%.3f GiB)\n",
               (long long)(nf4_dq_bytes - (total_bytes - linear_bytes)),
               gib((double)(nf4_dq_bytes - (total_bytes - linear_bytes))));
    }
    int rc = check ? check_values(&d) : 0;
    qlt_st_dir_close(&d);
    return rc != 0 ? qlt_cli_report_error() : 0;
}
