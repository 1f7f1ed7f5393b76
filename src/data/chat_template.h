/* chat_template.h: the built-in chat templates that render {"messages": [{"role", "content"}, ...]}
 * into tokens with a loss mask (documented in docs/DATA.md):
 *   chatml (Qwen):   per message  <|im_start|>ROLE\nCONTENT<|im_end|>\n
 *   llama3:          <|begin_of_text|>, then per message <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
 *                    (CONTENT trimmed of white space at both ends, as Llama-3's template does with `| trim`)
 *   mistral:         <s>, then [INST] USER[/INST] ASSISTANT</s> per exchange (mistral-common's tokenizer V2 / V3
 *                    layout: [INST] and [/INST] by id, " USER" and " ASSISTANT" with their leading space). With
 *                    a V1 tokenizer, where [INST] is no token, the four pieces [INST], USER, [/INST], ASSISTANT are
 *                    text without the spaces (its normalizer prepends one to each: " [INST] USER [/INST]
 *                    ASSISTANT", V1's layout). A system message is put before the next user message's content,
 *                    separated by "\n\n" (as mistral-common does); roles other than system, user and
 *                    assistant are refused.
 *   phi3:            per message <|ROLE|>\nCONTENT<|end|>\n (Phi-3 / Phi-3.5 / Phi-4-mini; ROLE system, user or
 *                    assistant, each a token of the tokenizer)
 *   gemma:           <bos>, then per message <start_of_turn>ROLE\nCONTENT<end_of_turn>\n (chat_template_gemma.h)
 * Loss is on assistant messages only: their CONTENT and the end-of-turn token (<|im_end|>, <|eot_id|>, </s>,
 * <|end|>); headers, the trailing "\n" of chatml and phi3 and every other role are masked. Template tokens are emitted by
 * id; ROLE, CONTENT and the newlines are encoded separately (so a mask boundary is always a token
 * boundary). */
#ifndef QLT_CHAT_TEMPLATE_H
#define QLT_CHAT_TEMPLATE_H

#include "config/config.h"
#include "tokenizer/tokenizer.h"

typedef struct qlt_chat_message {
    const char *role;
    const char *content;
} qlt_chat_message;

/* Resolves data.chat_template (auto: the template tokenizer_config.json's chat_template is recognisably
 * written for, else chatml when the tokenizer has <|im_start|>, llama3 when it has <|start_header_id|>,
 * mistral when it has [INST], phi3 when it has <|user|>) into *out, and checks that the tokenizer has the
 * template's special tokens. */
int qlt_chat_template_resolve(qlt_chat_template choice, const qlt_tokenizer *tok, qlt_chat_template *out);
const char *qlt_chat_template_name(qlt_chat_template t);
/* Appends the rendered conversation's ids and labels (-100 where masked; everything trained when
 * train_all). */
/* t: a resolved template (not auto). */
int qlt_chat_encode(qlt_chat_template t, const qlt_tokenizer *tok, qlt_encoder *enc, const qlt_chat_message *msgs,
                    int n_msgs, int train_all, qlt_ids *ids, qlt_ids *labels);

/* The prompt of a generation: the conversation as above, then the header of the assistant's turn that the model
 * is to write (Hugging Face's add_generation_prompt: "<|im_start|>assistant\n", Llama-3's assistant header,
 * "<|assistant|>\n"; nothing for mistral, whose prompt ends in [/INST]). */
int qlt_chat_encode_prompt(qlt_chat_template t, const qlt_tokenizer *tok, qlt_encoder *enc,
                           const qlt_chat_message *msgs, int n_msgs, qlt_ids *ids);
/* content with leading and trailing white space removed, as Jinja's `| trim` renders it (Llama-3's and
 * Gemma's templates): *len bytes from the returned pointer. */
const char *qlt_chat_trim(const char *content, size_t *len);
/* The token that ends a turn in template t (<|im_end|>, <|eot_id|>, </s>, <|end|>). */
int32_t qlt_chat_end_of_turn(qlt_chat_template t, const qlt_tokenizer *tok);

#endif
