/* cmd_inspect_gguf.c: `qlora-train inspect FILE.gguf [--check]`: what a llama.cpp GGUF file holds and how
 * qlora-train reads it: the architecture from its metadata (as the Hugging Face class it loads as), its
 * tokenizer, every tensor with its ggml type and shape (Hugging Face order, outermost first), bytes per
 * type, and what the linear layers take once loaded as NF4. --check also dequantizes every tensor and
 * names those holding NaN or infinity, or of a type qlora-train does not read. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "common/error.h"
#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "model/model_config.h"
#include "nf4/nf4.h"

#define N_TYPE_SLOTS 64 /* ggml type ids are below this */

static double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

/* blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight: what NF4 quantizes. */
static int is_linear(const char *name) {
    static const char *const suffixes[] = {".attn_q.weight",   ".attn_k.weight", ".attn_v.weight", ".attn_output.weight",
                                           ".ffn_gate.weight", ".ffn_up.weight", ".ffn_down.weight"};
    size_t n = strlen(name);
    if (strncmp(name, "blk.", 4) != 0) return 0;
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t l = strlen(suffixes[i]);
        if (n > l && strcmp(name + n - l, suffixes[i]) == 0) return 1;
    }
    return 0;
}

static void print_string_kv(const qlt_gguf *g, const char *label, const char *key) {
    const char *s;
    uint64_t len;
    if (qlt_gguf_get_string(g, key, &s, &len) == 1) printf("%s: %.*s\n", label, (int)(len > 200 ? 200 : len), s);
}

static void print_tokenizer(const qlt_gguf *g) {
    const char *model, *pre, *tmpl;
    uint64_t model_len, pre_len, tmpl_len;
    const qlt_gguf_kv *tokens = NULL, *merges = NULL;
    if (qlt_gguf_get_string(g, "tokenizer.ggml.model", &model, &model_len) != 1) {
        printf("tokenizer: none in the file (set data.tokenizer)\n");
        return;
    }
    qlt_gguf_get_string(g, "tokenizer.ggml.pre", &pre, &pre_len);
    qlt_gguf_get_array(g, "tokenizer.ggml.tokens", QLT_GGUF_VAL_STRING, &tokens);
    qlt_gguf_get_array(g, "tokenizer.ggml.merges", QLT_GGUF_VAL_STRING, &merges);
    qlt_gguf_get_string(g, "tokenizer.chat_template", &tmpl, &tmpl_len);
    const char *chat = "none";
    if (tmpl) {
        int chatml = memmem(tmpl, tmpl_len, "<|im_start|>", 12) != NULL;
        int llama3 = memmem(tmpl, tmpl_len, "<|start_header_id|>", 19) != NULL;
        chat = chatml && !llama3 ? "chatml" : llama3 && !chatml ? "llama3" : "not a built-in one";
    }
    printf("tokenizer: %.*s, pre %.*s, %llu tokens, %llu merges, chat template: %s\n", (int)(model_len > 32 ? 32 : model_len),
           model, pre ? (int)(pre_len > 32 ? 32 : pre_len) : 7, pre ? pre : "default",
           (unsigned long long)(tokens ? tokens->count : 0), (unsigned long long)(merges ? merges->count : 0), chat);
    qlt_error_clear();
}

/* --check: every tensor dequantized (in chunks of whole rows); 0 when all are finite and readable. */
static int check_values(const qlt_gguf *g) {
    int64_t n_bad = 0;
    const int64_t chunk = 1 << 20;
    float *buf = NULL;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const qlt_gguf_tensor *t = &g->tensors[i];
        if (!qlt_gguf_can_dequantize(t->type)) {
            printf("check: %s: ggml type %s is not read by qlora-train\n", t->name, qlt_ggml_type_name(t->type));
            n_bad++;
            continue;
        }
        int64_t row = t->ne[0] > 0 ? t->ne[0] : 1, rows_per = chunk / row > 0 ? chunk / row : 1;
        int64_t row_bytes = row / qlt_ggml_type_block(t->type) * qlt_ggml_type_block_bytes(t->type);
        buf = realloc(buf, sizeof(float) * (size_t)(rows_per * row));
        int64_t nan = 0, inf = 0, first = -1;
        for (int64_t r = 0; r * row < t->numel; r += rows_per) {
            int64_t n = (t->numel - r * row) < rows_per * row ? t->numel - r * row : rows_per * row;
            qlt_gguf_dequantize(t->type, (const uint8_t *)t->data + r * row_bytes, buf, n);
            for (int64_t k = 0; k < n; k++) {
                if (isfinite(buf[k])) continue;
                if (first < 0) first = r * row + k;
                if (isnan(buf[k])) nan++;
                else inf++;
            }
        }
        if (nan + inf) {
            printf("check: %s: %lld NaN, %lld infinite (first at element %lld of %lld)\n", t->name, (long long)nan,
                   (long long)inf, (long long)first, (long long)t->numel);
            n_bad++;
        }
    }
    free(buf);
    if (n_bad)
        return qlt_fail("inspect --check: %lld of %lld tensors hold NaN or infinite values or a type qlora-train does "
                        "not read (listed above)", (long long)n_bad, (long long)g->n_tensors);
    printf("check: every value of the %lld tensors is finite\n", (long long)g->n_tensors);
    return 0;
}

int qlt_cmd_inspect_gguf(const char *path, int check) {
    qlt_gguf g;
    if (qlt_gguf_open(&g, path) != 0) return qlt_cli_report_error();
    printf("model: %s (GGUF v%u, %lld key/values, %lld tensors, alignment %llu)\n", path, g.version, (long long)g.n_kv,
           (long long)g.n_tensors, (unsigned long long)g.alignment);
    print_string_kv(&g, "name", "general.name");
    qlt_model_config mc;
    const char *arch;
    uint64_t arch_len;
    qlt_gguf_get_string(&g, "general.architecture", &arch, &arch_len);
    if (qlt_model_config_from_gguf(&mc, &g) == 0) {
        printf("architecture: %s (general.architecture %.*s)  layers %d  hidden %d  heads %d / kv %d  head_dim %d  "
               "intermediate %d  vocab %d\n", mc.arch_name, (int)arch_len, arch, mc.n_layers, mc.hidden, mc.n_heads,
               mc.n_kv_heads, mc.head_dim, mc.intermediate, mc.vocab);
        printf("rope: theta %g%s  rms_eps %g  tied embeddings: %s  qkv bias: %s  qk norm: %s  context %d\n",
               mc.rope_theta, mc.rope_type == QLT_ROPE_FACTORS ? " (frequency factors from rope_freqs.weight)" : "",
               mc.rms_eps, mc.tie_word_embeddings ? "yes" : "no", mc.attention_bias ? "yes" : "no",
               mc.qk_norm ? "yes" : "no", mc.context_length);
        printf("parameters (from metadata): %lld total, %lld in linear layers\n", (long long)qlt_model_total_params(&mc),
               (long long)qlt_model_linear_params(&mc));
    } else {
        printf("architecture: not loadable: %s\n", qlt_error());
    }
    print_tokenizer(&g);
    int64_t bytes_by_type[N_TYPE_SLOTS] = {0}, count_by_type[N_TYPE_SLOTS] = {0};
    int64_t total_bytes = 0, n_params = 0, linear_bytes = 0, linear_params = 0, nf4_dq_bytes = 0, unreadable = 0;
    printf("\ntensors:\n");
    for (int64_t i = 0; i < g.n_tensors; i++) {
        const qlt_gguf_tensor *t = &g.tensors[i];
        char shape[96];
        qlt_gguf_format_shape(shape, sizeof shape, t);
        int readable = qlt_gguf_can_dequantize(t->type);
        printf("  %-40s %-6s [%s]%s\n", t->name, qlt_ggml_type_name(t->type), shape, readable ? "" : "  (not readable)");
        bytes_by_type[t->type] += (int64_t)t->nbytes; /* t->type < 42: qlt_gguf_open accepts known types only */
        count_by_type[t->type]++;
        total_bytes += (int64_t)t->nbytes;
        n_params += t->numel;
        unreadable += !readable;
        if (is_linear(t->name) && t->ndim == 2) {
            linear_bytes += (int64_t)t->nbytes;
            linear_params += t->numel;
            nf4_dq_bytes += qlt_nf4_bytes(t->numel, 64, 1);
        }
    }
    printf("\n%lld tensors, %lld parameters, %.3f GiB\n", (long long)g.n_tensors, (long long)n_params,
           gib((double)total_bytes));
    for (int t = 0; t < N_TYPE_SLOTS; t++)
        if (count_by_type[t])
            printf("  %-6s %6lld tensors  %14lld bytes  (%.3f GiB)\n", qlt_ggml_type_name((uint32_t)t),
                   (long long)count_by_type[t], (long long)bytes_by_type[t], gib((double)bytes_by_type[t]));
    printf("linear layers: %lld parameters, %lld bytes (%.3f GiB) as stored; loaded as NF4 (block 64, double "
           "quantization): %lld bytes (%.3f GiB); every other tensor loads dequantized and dense\n",
           (long long)linear_params, (long long)linear_bytes, gib((double)linear_bytes), (long long)nf4_dq_bytes,
           gib((double)nf4_dq_bytes));
    if (unreadable)
        printf("%lld tensors have a type qlora-train does not read (it reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
               "Q5_1, Q4_K, Q5_K, Q6_K)\n", (long long)unreadable);
    int rc = check ? check_values(&g) : 0;
    qlt_gguf_close(&g);
    return rc != 0 ? qlt_cli_report_error() : 0;
}
