/* chat_template.c: chatml and llama3 rendering with assistant-only loss (see chat_template.h). */
#include "io/chat_template.h"

#include <string.h>

#include "common/error.h"
#include "io/labeled.h"

static const char *const chatml_tokens[] = {"<|im_start|>", "<|im_end|>"};
static const char *const llama3_tokens[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                            "<|eot_id|>"};

const char *qlt_chat_template_name(qlt_chat_template t) { return t == QLT_CHAT_CHATML ? "chatml" : "llama3"; }

static int check_tokens(const qlt_tokenizer *tok, const char *name, const char *const *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (qlt_tokenizer_token_id(tok, tokens[i]) < 0)
            return qlt_fail("data.chat_template: %s needs the token %s, which the tokenizer does not have (set "
                            "data.chat_template to the model's template: chatml for Qwen, llama3 for Llama-3)",
                            name, tokens[i]);
    return 0;
}

int qlt_chat_template_resolve(const char *name, const qlt_tokenizer *tok, qlt_chat_template *out) {
    if (!name || !name[0] || strcmp(name, "auto") == 0) {
        if (qlt_tokenizer_token_id(tok, "<|im_start|>") >= 0) name = "chatml";
        else if (qlt_tokenizer_token_id(tok, "<|start_header_id|>") >= 0) name = "llama3";
        else
            return qlt_fail("data.chat_template: auto found neither <|im_start|> (chatml) nor <|start_header_id|> "
                            "(llama3) in the tokenizer; data.format: chat needs one of these templates");
    }
    if (strcmp(name, "chatml") == 0) {
        *out = QLT_CHAT_CHATML;
        return check_tokens(tok, name, chatml_tokens, 2);
    }
    if (strcmp(name, "llama3") == 0) {
        *out = QLT_CHAT_LLAMA3;
        return check_tokens(tok, name, llama3_tokens, 4);
    }
    return qlt_fail("data.chat_template: unknown template \"%s\" (use auto, chatml or llama3)", name);
}

int qlt_chat_encode(qlt_chat_template t, const qlt_tokenizer *tok, qlt_encoder *enc, const qlt_chat_message *msgs,
                    int n_msgs, int train_all, qlt_ids *ids, qlt_ids *labels) {
    if (t == QLT_CHAT_CHATML) {
        int32_t start = qlt_tokenizer_token_id(tok, "<|im_start|>"), end = qlt_tokenizer_token_id(tok, "<|im_end|>");
        for (int m = 0; m < n_msgs; m++) {
            int train = train_all || strcmp(msgs[m].role, "assistant") == 0;
            qlt_labeled_push(ids, labels, start, train_all);
            QLT_TRY(qlt_labeled_text(enc, msgs[m].role, train_all, ids, labels));
            QLT_TRY(qlt_labeled_text(enc, "\n", train_all, ids, labels));
            QLT_TRY(qlt_labeled_text(enc, msgs[m].content, train, ids, labels));
            qlt_labeled_push(ids, labels, end, train);
            QLT_TRY(qlt_labeled_text(enc, "\n", train_all, ids, labels));
        }
        return 0;
    }
    int32_t bos = qlt_tokenizer_token_id(tok, "<|begin_of_text|>");
    int32_t hstart = qlt_tokenizer_token_id(tok, "<|start_header_id|>");
    int32_t hend = qlt_tokenizer_token_id(tok, "<|end_header_id|>");
    int32_t eot = qlt_tokenizer_token_id(tok, "<|eot_id|>");
    qlt_labeled_push(ids, labels, bos, train_all);
    for (int m = 0; m < n_msgs; m++) {
        int train = train_all || strcmp(msgs[m].role, "assistant") == 0;
        qlt_labeled_push(ids, labels, hstart, train_all);
        QLT_TRY(qlt_labeled_text(enc, msgs[m].role, train_all, ids, labels));
        qlt_labeled_push(ids, labels, hend, train_all);
        QLT_TRY(qlt_labeled_text(enc, "\n\n", train_all, ids, labels));
        QLT_TRY(qlt_labeled_text(enc, msgs[m].content, train, ids, labels));
        qlt_labeled_push(ids, labels, eot, train);
    }
    return 0;
}
