/* test_gguf_write.c: the GGUF writer's bytes (header, metadata, tensor infos, aligned data), Q8_0 as
 * ggml's reference quantize_row_q8_0 defines it, llama.cpp's tensor names and q/k permute, the tokenizer
 * metadata taken from tokenizer.json, and `merge --format gguf` end to end (scripts/gguf_merge_check.py
 * reads the files back with the gguf package and compares every tensor). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "formats/gguf_write.h"
#include "model/gguf_export.h"
#include "model/gguf_vocab.h"
#include "test_util.h"

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* A reader of just what the tests need: walks the file as llama.cpp's gguf.cpp does. */
typedef struct reader {
    const unsigned char *p;
    size_t at, len;
} reader;

static uint64_t rd(reader *r, int n) {
    cr_assert(r->at + (size_t)n <= r->len, "read past the end at %zu", r->at);
    uint64_t v = le(r->p + r->at, n);
    r->at += (size_t)n;
    return v;
}

static char *rd_string(reader *r) {
    uint64_t n = rd(r, 8);
    cr_assert(r->at + n <= r->len);
    char *s = strndup((const char *)r->p + r->at, n);
    r->at += n;
    return s;
}

Test(gguf_write, file_layout) {
    char *tmp = test_tmpdir(), *path = qlt_path_join(tmp, "t.gguf");
    qlt_gguf_writer w;
    qlt_gguf_writer_init(&w);
    qlt_gguf_add_string(&w, "general.architecture", "llama");
    qlt_gguf_add_u32(&w, "llama.block_count", 3);
    qlt_gguf_add_f32(&w, "llama.rope.freq_base", 500000.0f);
    const char *toks[2] = {"a", "Ġb"};
    qlt_gguf_add_string_array(&w, "tokenizer.ggml.tokens", toks, 2);
    int64_t ne_a[1] = {5}, ne_b[2] = {32, 2};
    cr_assert_eq(qlt_gguf_add_tensor(&w, "a", 1, ne_a, QLT_GGUF_F32), 0);
    cr_assert_eq(qlt_gguf_add_tensor(&w, "b", 2, ne_b, QLT_GGUF_Q8_0), 0);
    int64_t bad[2] = {48, 2};
    cr_expect_eq(qlt_gguf_add_tensor(&w, "c", 2, bad, QLT_GGUF_Q8_0), -1);
    cr_expect(strstr(qlt_error(), "'c'") && strstr(qlt_error(), "multiple of 32"), "%s", qlt_error());
    cr_assert_eq(qlt_gguf_begin(&w, path), 0, "%s", qlt_error());
    float a[5] = {1, 2, 3, 4, 5}, b[64];
    for (int i = 0; i < 64; i++) b[i] = (float)i - 20.0f;
    unsigned char qb[68];
    qlt_gguf_quantize_q8_0(b, qb, 64);
    cr_assert_eq(qlt_gguf_write_data(&w, a, sizeof a), 0);
    cr_assert_eq(qlt_gguf_write_data(&w, qb, sizeof qb), 0);
    cr_assert_eq(qlt_gguf_finish(&w), 0, "%s", qlt_error());
    qlt_gguf_writer_free(&w);

    char *data;
    size_t len;
    cr_assert_eq(qlt_read_file(path, &data, &len), 0);
    reader r = {(const unsigned char *)data, 0, len};
    cr_expect(memcmp(data, "GGUF", 4) == 0);
    r.at = 4;
    cr_expect_eq(rd(&r, 4), 3);
    cr_expect_eq(rd(&r, 8), 2); /* tensors */
    cr_expect_eq(rd(&r, 8), 4); /* key/values */
    char *k = rd_string(&r);
    cr_expect_str_eq(k, "general.architecture");
    free(k);
    cr_expect_eq(rd(&r, 4), 8); /* string */
    k = rd_string(&r);
    cr_expect_str_eq(k, "llama");
    free(k);
    k = rd_string(&r);
    free(k);
    cr_expect_eq(rd(&r, 4), 4); /* uint32 */
    cr_expect_eq(rd(&r, 4), 3);
    k = rd_string(&r);
    free(k);
    cr_expect_eq(rd(&r, 4), 6); /* float32 */
    uint32_t bits = (uint32_t)rd(&r, 4);
    float f;
    memcpy(&f, &bits, 4);
    cr_expect_eq(f, 500000.0f);
    k = rd_string(&r);
    free(k);
    cr_expect_eq(rd(&r, 4), 9); /* array */
    cr_expect_eq(rd(&r, 4), 8); /* of strings */
    cr_expect_eq(rd(&r, 8), 2);
    k = rd_string(&r);
    free(k);
    k = rd_string(&r);
    cr_expect_str_eq(k, "Ġb");
    free(k);
    int64_t offsets[2];
    for (int t = 0; t < 2; t++) {
        k = rd_string(&r);
        cr_expect_str_eq(k, t ? "b" : "a");
        free(k);
        int nd = (int)rd(&r, 4);
        cr_expect_eq(nd, t ? 2 : 1);
        for (int d = 0; d < nd; d++) cr_expect_eq((int64_t)rd(&r, 8), t ? ne_b[d] : ne_a[d]);
        cr_expect_eq(rd(&r, 4), t ? 8u : 0u);
        offsets[t] = (int64_t)rd(&r, 8);
    }
    cr_expect_eq(offsets[0], 0);
    cr_expect_eq(offsets[1], 32, "the second tensor starts at the next multiple of 32");
    size_t data_start = (r.at + 31) / 32 * 32;
    cr_assert_eq(len, data_start + 32 + 96, "every tensor is padded to 32 bytes, the last too (as ggml writes it)");
    cr_expect(memcmp(data + data_start, a, sizeof a) == 0);
    cr_expect(memcmp(data + data_start + 32, qb, sizeof qb) == 0);
    free(data);
    qlt_remove_tree(tmp);
    free(tmp);
    free(path);
}

/* ggml's reference: d = max|x| / 127 stored as float16, codes roundf(x * (1/d)): half away from zero. */
Test(gguf_write, q8_0_as_ggml_reference) {
    float x[64];
    for (int j = 0; j < 32; j++) x[j] = 0.0f;
    x[0] = 127.0f; /* d = 1 */
    x[1] = 2.5f;   /* -> 3 (half away from zero; rint would give 2) */
    x[2] = -2.5f;  /* -> -3 */
    x[3] = 1.5f;
    x[4] = -127.0f;
    for (int j = 32; j < 64; j++) x[j] = 0.0f; /* an all-zero block: d 0, codes 0 */
    unsigned char q[68];
    qlt_gguf_quantize_q8_0(x, q, 64);
    cr_expect_eq(le(q, 2), 0x3c00, "d = 1.0 in float16");
    cr_expect_eq((int8_t)q[2], 127);
    cr_expect_eq((int8_t)q[3], 3);
    cr_expect_eq((int8_t)q[4], -3);
    cr_expect_eq((int8_t)q[5], 2);
    cr_expect_eq((int8_t)q[6], -127);
    for (int j = 0; j < 34; j++) cr_expect_eq(q[34 + j], 0);
    /* a scale that float16 rounds: d = 0.1 / 127 -> float16 bits of that, codes from the float32 d */
    float y[32];
    for (int j = 0; j < 32; j++) y[j] = (float)(j - 16) * (0.1f / 16.0f);
    qlt_gguf_quantize_q8_0(y, q, 32);
    float d = 0.1f / 127.0f;
    cr_expect_eq(le(q, 2), qlt_f32_to_f16(d));
    for (int j = 0; j < 32; j++) cr_expect_eq((int8_t)q[2 + j], (int8_t)roundf(y[j] * (1.0f / d)), "code %d", j);
    float back[32];
    qlt_gguf_dequantize_q8_0(q, back, 32);
    for (int j = 0; j < 32; j++) cr_expect_eq(back[j], (float)(int8_t)q[2 + j] * qlt_f16_to_f32(qlt_f32_to_f16(d)));
}

Test(gguf_write, llama_cpp_names_and_permute) {
    char n[128];
    cr_expect_eq(qlt_gguf_tensor_name("model.embed_tokens.weight", n, sizeof n), 1);
    cr_expect_str_eq(n, "token_embd.weight");
    cr_expect_eq(qlt_gguf_tensor_name("lm_head.weight", n, sizeof n), 1);
    cr_expect_str_eq(n, "output.weight");
    cr_expect_eq(qlt_gguf_tensor_name("model.norm.weight", n, sizeof n), 1);
    cr_expect_str_eq(n, "output_norm.weight");
    cr_expect_eq(qlt_gguf_tensor_name("model.layers.11.self_attn.o_proj.weight", n, sizeof n), 1);
    cr_expect_str_eq(n, "blk.11.attn_output.weight");
    cr_expect_eq(qlt_gguf_tensor_name("model.layers.0.post_attention_layernorm.weight", n, sizeof n), 1);
    cr_expect_str_eq(n, "blk.0.ffn_norm.weight");
    cr_expect_eq(qlt_gguf_tensor_name("model.layers.3.self_attn.k_norm.weight", n, sizeof n), 1);
    cr_expect_str_eq(n, "blk.3.attn_k_norm.weight");
    cr_expect_eq(qlt_gguf_tensor_name("model.layers.3.self_attn.q_proj.bias", n, sizeof n), 1);
    cr_expect_str_eq(n, "blk.3.attn_q.bias");
    cr_expect_eq(qlt_gguf_tensor_name("model.layers.0.mlp.down_proj.weight", n, sizeof n), 1);
    cr_expect_str_eq(n, "blk.0.ffn_down.weight");
    cr_expect_eq(qlt_gguf_tensor_name("model.rotary_emb.inv_freq", n, sizeof n), 0);
    cr_expect_eq(qlt_gguf_tensor_name("model.layers.0.mlp.experts.0.weight", n, sizeof n), -1);
    cr_expect_str_eq(qlt_gguf_arch_name(QLT_ARCH_MISTRAL), "llama");
    cr_expect_str_eq(qlt_gguf_arch_name(QLT_ARCH_QWEN3), "qwen3");
    /* two heads of 4 rows: [h0: 0 1 | 2 3, h1: 4 5 | 6 7] (rotate-half halves) -> pairs (0 2)(1 3)(4 6)(5 7) */
    int32_t src[8] = {0, 1, 2, 3, 4, 5, 6, 7}, dst[8];
    qlt_gguf_permute_rows(dst, src, 8, sizeof(int32_t), 2);
    int32_t want[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    cr_expect(memcmp(dst, want, sizeof want) == 0, "%d %d %d %d %d %d %d %d", dst[0], dst[1], dst[2], dst[3], dst[4],
              dst[5], dst[6], dst[7]);
    /* Llama 3 RoPE: short wavelengths keep 1, long ones take factor, the rest smoothed between */
    qlt_model_config c = {.head_dim = 128, .rope_theta = 500000.0, .rope_factor = 8.0, .rope_low_freq_factor = 1.0,
                          .rope_high_freq_factor = 4.0, .rope_original_max_pos = 8192};
    float f[64];
    qlt_gguf_llama3_rope_factors(&c, f);
    cr_expect_eq(f[0], 1.0f);
    cr_expect_eq(f[63], 8.0f);
    int smoothed = 0;
    for (int i = 0; i < 64; i++) smoothed += f[i] > 1.0f && f[i] < 8.0f;
    cr_expect_gt(smoothed, 0);
    for (int i = 1; i < 64; i++) cr_expect_geq(f[i], f[i - 1]);
}

/* tokenizer.json -> tokenizer.ggml.*: tokens and types (normal, control for special or <|...|>, user-defined,
 * [PAD] fillers), merges from [a, b] pairs with spaces as U+0120, the pre-tokenizer by its regex, special ids
 * from tokenizer_config.json before config.json. */
Test(gguf_write, vocab_from_tokenizer_json) {
    char *tmp = test_tmpdir(), *tj = qlt_path_join(tmp, "tokenizer.json"), *tc = qlt_path_join(tmp, "tokenizer_config.json");
    char *cfg = qlt_path_join(tmp, "config.json");
    test_write_text(tj,
                    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"a b\": 3},"
                    " \"merges\": [[\"a\", \"b\"], [\"a \", \"b\"]]},"
                    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\":"
                    " \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
                    "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}}, {\"type\": \"ByteLevel\"}]},"
                    " \"added_tokens\": [{\"id\": 5, \"content\": \"<|end|>\", \"special\": true},"
                    " {\"id\": 6, \"content\": \"<think>\", \"special\": false},"
                    " {\"id\": 7, \"content\": \"<|fim|>\", \"special\": false}]}");
    test_write_text(tc, "{\"eos_token\": \"<|end|>\", \"pad_token\": {\"content\": \"<|end|>\"}, \"add_bos_token\": false,"
                        " \"chat_template\": \"{{ messages }}\"}");
    test_write_text(cfg, "{\"bos_token_id\": 1, \"eos_token_id\": 4}");
    qlt_gguf_vocab v;
    cr_assert_eq(qlt_gguf_vocab_load(&v, tj, tmp, 10), 0, "%s", qlt_error());
    cr_expect_eq(v.n, 10);
    cr_expect_str_eq(v.tokens[3], "a b");
    cr_expect_str_eq(v.tokens[4], "[PAD4]");
    cr_expect_eq(v.types[4], QLT_GGUF_TOKEN_UNUSED);
    cr_expect_eq(v.types[0], QLT_GGUF_TOKEN_NORMAL);
    cr_expect_eq(v.types[5], QLT_GGUF_TOKEN_CONTROL);
    cr_expect_eq(v.types[6], QLT_GGUF_TOKEN_USER_DEFINED);
    cr_expect_eq(v.types[7], QLT_GGUF_TOKEN_CONTROL, "looks special: <|...|>");
    cr_expect_str_eq(v.tokens[9], "[PAD9]");
    cr_assert_eq(v.n_merges, 2);
    cr_expect_str_eq(v.merges[0], "a b");
    cr_expect_str_eq(v.merges[1], "a\xc4\xa0 b", "a space inside a part is U+0120");
    cr_expect_str_eq(v.pre, "qwen2");
    cr_expect_eq(v.eos, 5, "tokenizer_config.json's eos_token wins over config.json's eos_token_id");
    cr_expect_eq(v.pad, 5);
    cr_expect_eq(v.bos, 1, "config.json's bos_token_id");
    cr_expect_eq(v.add_bos, 0);
    cr_expect_str_eq(v.chat_template, "{{ messages }}");
    qlt_gguf_vocab_free(&v);
    /* a tokenizer with ids past the model's vocabulary is another model's */
    cr_expect_eq(qlt_gguf_vocab_load(&v, tj, tmp, 6), -1);
    cr_expect(strstr(qlt_error(), tj) && strstr(qlt_error(), "vocab_size 6"), "%s", qlt_error());
    test_write_text(tj, "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
    cr_expect_eq(qlt_gguf_vocab_load(&v, tj, tmp, 10), -1);
    cr_expect(strstr(qlt_error(), "byte-level BPE"), "%s", qlt_error());
    qlt_remove_tree(tmp);
    free(tmp);
    free(tj);
    free(tc);
    free(cfg);
}

/* merge --format gguf: a file with llama.cpp's tensors (q/k permuted for llama, no output for tied models);
 * without a tokenizer it is a one-line error naming data.tokenizer. */
Test(gguf_write, merge_to_gguf) {
    char *tmp = test_tmpdir(), *src = test_fixture_path("tiny-qwen3", NULL), *adapter = test_fixture_path("tiny-qwen3", "adapter-init");
    char *yaml = qlt_path_join(tmp, "c.yaml"), *tok = qlt_path_join(tmp, "tokenizer.json"), *text = NULL, *out = NULL;
    char *gguf = qlt_path_join(tmp, "m.gguf");
    test_write_text(tok, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}");
    if (asprintf(&text, "model: {path: %s, quant: nf4}\n", src) < 0) abort();
    test_write_text(yaml, text);
    free(text);
    char *args = NULL;
    if (asprintf(&args, "merge --config %s --adapter %s --out %s --format gguf --dtype q8_0", yaml, adapter, gguf) < 0) abort();
    cr_assert_neq(test_run_cli(NULL, args, &out), 0, "no tokenizer: should fail\n%s", out);
    cr_expect(strstr(out, "qlora-train: error: ") && strstr(out, "data.tokenizer") && strchr(out, '\n')[1] == '\0', "%s", out);
    cr_expect(!qlt_file_exists(gguf));
    free(out);
    free(args);
    if (asprintf(&args, "merge --config %s --set data.tokenizer=%s --adapter %s --out %s --format gguf --dtype q8_0", yaml,
                 tok, adapter, gguf) < 0)
        abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    free(out);
    size_t len;
    cr_assert_eq(qlt_read_file(gguf, &text, &len), 0);
    cr_expect(memcmp(text, "GGUF", 4) == 0);
    cr_expect_eq(le((const unsigned char *)text + 8, 8), 2 + 2 * 11, "tensors: embedding, norm, 2 layers x 11");
    cr_expect(memmem(text, len, "blk.1.attn_k_norm.weight", 24) != NULL);
    cr_expect(memmem(text, len, "\x0d\0\0\0\0\0\0\0output.weight", 21) == NULL, "tied: no output tensor");
    cr_expect(memmem(text, len, "\x12\0\0\0\0\0\0\0output_norm.weight", 26) != NULL);
    cr_expect(memmem(text, len, "qwen3.attention.key_length", 26) != NULL);
    free(text);
    cr_assert_neq(test_run_cli(NULL, args, &out), 0, "an existing --out is refused\n%s", out);
    cr_expect(strstr(out, "already exists"), "%s", out);
    free(out);
    free(args);
    qlt_remove_tree(tmp);
    free(tmp);
    free(src);
    free(adapter);
    free(yaml);
    free(tok);
    free(gguf);
}
