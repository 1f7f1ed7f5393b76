/* chat_template_gemma.h: Gemma's chat template (Gemma 2 / 3), beside chat_template.c's others:
 *   <bos>, then per message <start_of_turn>ROLE\nCONTENT<end_of_turn>\n with ROLE user or model (the assistant),
 *   CONTENT trimmed of white space at both ends (the template's `| trim`); a first system message is put before
 *   the first user message's content with "\n\n" (as Gemma 3's template does; Gemma 2's refuses system messages),
 *   any other role or a later system message is refused.
 * Loss on the model's CONTENT and its <end_of_turn>; <bos>, the headers, the user's turns and the "\n" after
 * <end_of_turn> are masked. <bos>, <start_of_turn> and <end_of_turn> are emitted by id. */
#ifndef QLT_CHAT_TEMPLATE_GEMMA_H
#define QLT_CHAT_TEMPLATE_GEMMA_H

#include "data/chat_template.h"

/* The tokens the template emits by id. */
extern const char *const qlt_chat_gemma_tokens[3];
/* Appends the conversation's ids and labels (everything trained when train_all). */
int qlt_chat_gemma_encode(const qlt_tokenizer *tok, qlt_encoder *enc, const qlt_chat_message *msgs, int n_msgs,
                          int train_all, qlt_ids *ids, qlt_ids *labels);
/* The generation prompt's tail after the conversation: <start_of_turn>model\n. */
int qlt_chat_gemma_prompt_tail(const qlt_tokenizer *tok, qlt_encoder *enc, qlt_ids *ids, qlt_ids *labels);

#endif
