/* tokenizer.h: a Hugging Face tokenizer.json with a BPE model, encoding exactly like tokenizers'
 * `encode(text, add_special_tokens=False)` and decoding like its `decode(ids, skip_special_tokens=False)`:
 *   1. added tokens (special or not) are cut out of the raw text first, longest match first;
 *   2. the rest is normalized (normalize.h: NFC etc., Replace, Prepend);
 *   3. cut into words by the pre-tokenizer chain (pre_tokenizer.h: Split regex, Digits, ByteLevel,
 *      Metaspace);
 *   4. each word is merged by BPE (bpe.h): over its bytes for byte-level models (Qwen, Llama-3, GPT-2,
 *      SmolLM), over its characters otherwise (Llama-2, Mistral, Gemma: byte_fallback, unk_token).
 * Decoding runs the file's decoder chain (decoder.h) over the tokens' strings. Other models (Unigram,
 * WordPiece, WordLevel) and unsupported steps are refused at load with an error naming what is supported.
 *
 * A qlt_tokenizer is read-only after load: share one across threads, each thread with its own
 * qlt_encoder (regex match state, merge scratch and a cache of recent words). */
#ifndef QLT_TOKENIZER_H
#define QLT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/token_ids.h"

typedef struct qlt_tokenizer qlt_tokenizer;
typedef struct qlt_encoder qlt_encoder;

/* Loads path (a tokenizer.json; tokenizer_config.json beside it, when present, names eos/pad). Errors
 * name the file and the key or byte offset. */
int qlt_tokenizer_load(qlt_tokenizer **out, const char *path);
/* Builds a tokenizer from len bytes of tokenizer.json text; `name` stands for it in error messages.
 * eos is found by name (see qlt_tokenizer_eos_id), pad is eos. */
int qlt_tokenizer_load_json(qlt_tokenizer **out, const char *json, size_t len, const char *name);
/* Applies tokenizer_config.json text to a loaded tokenizer, as qlt_tokenizer_load does with the file
 * beside tokenizer.json: eos_token (when no well-known name gave eos), pad_token, and the chat template's
 * name; the text joins the tokenizer's hash. For tokenizers built in memory (a GGUF file's). */
int qlt_tokenizer_apply_config(qlt_tokenizer *tok, const char *config_json, const char *name);
void qlt_tokenizer_free(qlt_tokenizer *tok);

/* Number of ids (max id + 1, added tokens included). */
int32_t qlt_tokenizer_n_ids(const qlt_tokenizer *tok);
/* The id of an added token by its text (e.g. "<|im_end|>"), else of the vocabulary token whose bytes
 * equal `text`; -1 when neither exists. */
int32_t qlt_tokenizer_token_id(const qlt_tokenizer *tok, const char *text);
/* End of a document: <|endoftext|>, <|end_of_text|>, </s> or <eos> when the tokenizer has one, else
 * tokenizer_config.json's eos_token; -1 when none. */
int32_t qlt_tokenizer_eos_id(const qlt_tokenizer *tok);
/* Padding: tokenizer_config.json's pad_token, else the eos id (0 when neither). */
int32_t qlt_tokenizer_pad_id(const qlt_tokenizer *tok);
/* 64-bit hash of the tokenizer.json bytes (and of text given to qlt_tokenizer_apply_config): the dataset
 * cache key. */
uint64_t qlt_tokenizer_hash(const qlt_tokenizer *tok);
/* "chatml", "llama3", "mistral" or "phi3" when tokenizer_config.json's chat_template is recognisably one of
 * them, else NULL. */
const char *qlt_tokenizer_chat_template(const qlt_tokenizer *tok);

/* Per-thread encoding state. */
qlt_encoder *qlt_encoder_new(const qlt_tokenizer *tok);
void qlt_encoder_free(qlt_encoder *enc);
/* Appends the ids of len bytes of text to out. Fails (nothing appended) when text is not valid UTF-8. */
int qlt_encoder_encode(qlt_encoder *enc, const char *text, size_t len, qlt_ids *out);
/* Convenience: one-shot encode with a temporary encoder. */
int qlt_tokenizer_encode(const qlt_tokenizer *tok, const char *text, size_t len, qlt_ids *out);

/* Decodes n ids into a new NUL-terminated UTF-8 string (*len bytes, free() it), as tokenizers'
 * decode(ids, skip_special_tokens=False). Fails on an id that is not in the tokenizer. */
int qlt_tokenizer_decode(const qlt_tokenizer *tok, const int32_t *ids, int64_t n, char **text, size_t *len);

#endif
