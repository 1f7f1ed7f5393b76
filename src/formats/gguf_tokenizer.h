/* gguf_tokenizer.h: the tokenizer a GGUF file carries in its metadata, as the project's tokenizer.
 *
 * A byte-level BPE tokenizer (tokenizer.ggml.model "gpt2") is turned into the Hugging Face tokenizer.json
 * it was converted from, built in memory and handed to qlt_tokenizer_load_json, then
 * qlt_tokenizer_apply_config with the configuration below:
 *   model: BPE, vocab = the tokens of type NORMAL (and UNKNOWN / BYTE / UNDEFINED), merges as stored;
 *   added_tokens = the CONTROL (special) and USER_DEFINED (not special) tokens, by their text, which
 *   are in the vocabulary too (byte-level spelling) as in the models that keep them there (SmolLM2):
 *   Hugging Face's tokenizers then give them the same ids;
 *   UNUSED tokens (llama.cpp's "[PAD<id>]" fillers) are left out;
 *   normalizer and pre-tokenizer: what tokenizer.ggml.pre stands for in llama.cpp, written as the original
 *   model's tokenizer.json has them:
 *     "gpt2", "default" (or no pre key)   ByteLevel with GPT-2's regex
 *     "smollm"                            Digits (each digit alone), then ByteLevel with GPT-2's regex
 *     "llama-bpe", "llama3", "llama-v3"   Llama-3's Split regex, ByteLevel without regex; ignore_merges
 *     "qwen2"                             NFC, Qwen2's Split regex (digits alone), ByteLevel without regex
 *   decoder: ByteLevel.
 * A tokenizer_config.json equivalent names eos_token / pad_token (tokenizer.ggml.eos_token_id /
 * padding_token_id) and carries tokenizer.chat_template, so eos, padding and data.chat_template: auto
 * behave as with the Hugging Face files. SentencePiece ("llama"), WordPiece and other models are refused
 * with an error that points to data.tokenizer. */
#ifndef QLT_GGUF_TOKENIZER_H
#define QLT_GGUF_TOKENIZER_H

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

/* The tokenizer.json text (*json) and tokenizer_config.json text (*config_json) equivalent to g's
 * tokenizer metadata, both heap. -1 with qlt_fail naming the file and key. */
int qlt_gguf_tokenizer_json(const qlt_gguf *g, char **json, char **config_json);
/* The tokenizer of g's metadata. */
int qlt_gguf_tokenizer_load(qlt_tokenizer **out, const qlt_gguf *g);
/* The same, opening path. */
int qlt_gguf_tokenizer_load_file(qlt_tokenizer **out, const char *path);

#endif
