/* chat_template_gemma.c: Gemma's <start_of_turn> template with loss on the model's turns (see
 * chat_template_gemma.h). */
#include "data/chat_template_gemma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/labeled.h"

const char *const qlt_chat_gemma_tokens[3] = {"<bos>", "<start_of_turn>", "<end_of_turn>"};

int qlt_chat_gemma_encode(const qlt_tokenizer *tok, qlt_encoder *enc, const qlt_chat_message *msgs, int n_msgs,
                          int train_all, qlt_ids *ids, qlt_ids *labels) {
    const int32_t start = qlt_tokenizer_token_id(tok, "<start_of_turn>");
    const int32_t end = qlt_tokenizer_token_id(tok, "<end_of_turn>");
    qlt_labeled_push(ids, labels, qlt_tokenizer_token_id(tok, "<bos>"), train_all);
    const char *system = NULL;
    int first = 0;
    if (n_msgs > 0 && strcmp(msgs[0].role, "system") == 0) {
        system = msgs[0].content;
        first = 1;
    }
    for (int m = first; m < n_msgs; m++) {
        const int user = strcmp(msgs[m].role, "user") == 0, model = strcmp(msgs[m].role, "assistant") == 0;
        if (!user && !model)
            return qlt_fail("data.chat_template gemma: message %d has role '%s'; Gemma's template knows user and "
                            "assistant (and a system message first)", m, msgs[m].role);
        const int train = train_all || model;
        qlt_labeled_push(ids, labels, start, train_all);
        QLT_TRY(qlt_labeled_text(enc, user ? "user\n" : "model\n", train_all, ids, labels));
        size_t len;
        const char *content = qlt_chat_trim(msgs[m].content, &len);
        if (m == first && system) { /* Gemma 3: the system text opens the first turn */
            size_t n = strlen(system) + 2 + len + 1;
            char *text = qlt_xmalloc(n);
            snprintf(text, n, "%s\n\n%.*s", system, (int)len, content);
            int rc = qlt_labeled_text(enc, text, train, ids, labels);
            free(text);
            QLT_TRY(rc);
        } else {
            QLT_TRY(qlt_labeled_span(enc, content, len, train, ids, labels));
        }
        qlt_labeled_push(ids, labels, end, train);
        QLT_TRY(qlt_labeled_text(enc, "\n", train_all, ids, labels));
    }
    return 0;
}

int qlt_chat_gemma_prompt_tail(const qlt_tokenizer *tok, qlt_encoder *enc, qlt_ids *ids, qlt_ids *labels) {
    qlt_labeled_push(ids, labels, qlt_tokenizer_token_id(tok, "<start_of_turn>"), 1);
    return qlt_labeled_text(enc, "model\n", 1, ids, labels);
}
