/* gguf_export.h: a merged model (model/merge.h) written as one GGUF file llama.cpp loads, laid out as
 * llama.cpp's convert_hf_to_gguf.py lays out the same Hugging Face model:
 * - general.architecture "llama" (Llama, Mistral), "qwen2" or "qwen3" and the hyper-parameters the converter
 *   writes (<arch>.block_count, .context_length, .embedding_length, .feed_forward_length,
 *   .attention.head_count, .attention.head_count_kv, .rope.freq_base, .attention.layer_norm_rms_epsilon,
 *   .attention.key_length / .value_length when config.json names head_dim; llama: .vocab_size and
 *   .rope.dimension_count), general.file_type and general.quantization_version;
 * - llama.cpp's tensor names (token_embd, blk.N.attn_q / attn_k / attn_v / attn_output / attn_q_norm /
 *   attn_k_norm / attn_norm / ffn_gate / ffn_up / ffn_down / ffn_norm, output_norm, output; no output with
 *   tied embeddings), 1-D tensors in F32, matrices in the chosen type (Q8_0 falls back to F16 for rows that
 *   are not a multiple of 32 values, as the converter does);
 * - for "llama", the q / k rows of each head permuted from Hugging Face's rotate-half order to ggml's
 *   interleaved one (the converter's permute), and Llama 3 RoPE scaling as the rope_freqs.weight factors;
 * - the tokenizer as tokenizer.ggml.* metadata (model/gguf_vocab.h). */
#ifndef QLT_GGUF_EXPORT_H
#define QLT_GGUF_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "formats/gguf_write.h"
#include "model/merge.h"
#include "model/model_config.h"

typedef struct qlt_gguf_export_opts {
    qlt_gguf_type type;         /* matrices: F32, F16, BF16 or Q8_0 */
    const char *tokenizer_json; /* the tokenizer the file carries */
} qlt_gguf_export_opts;

/* Writes path (atomically). 0, or -1 with qlt_fail naming the tensor or file. */
int qlt_gguf_export(const qlt_merge *m, const char *path, const qlt_gguf_export_opts *o);

/* "llama", "qwen2" or "qwen3". */
const char *qlt_gguf_arch_name(qlt_arch arch);
/* llama.cpp's name of a Hugging Face tensor: 1 and out filled, 0 for a tensor GGUF leaves out
 * (rotary_emb.inv_freq), -1 for one it has no name for. */
int qlt_gguf_tensor_name(const char *hf_name, char *out, size_t size);
/* The converter's permute of q / k for llama: each head's rows [2, head_dim / 2] (rotate-half) become
 * [head_dim / 2, 2] (interleaved pairs). dst and src: rows x row_bytes bytes, rows a multiple of 2 * n_heads. */
void qlt_gguf_permute_rows(void *dst, const void *src, int64_t rows, size_t row_bytes, int n_heads);
/* Llama 3 RoPE scaling as llama.cpp takes it: the divisor of each of the head_dim / 2 frequencies
 * (1 for short wavelengths, factor for long ones, smoothed between), computed as the converter does. */
void qlt_gguf_llama3_rope_factors(const qlt_model_config *c, float *out);

#endif
