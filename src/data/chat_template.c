/* chat_template.c: chatml and llama3 rendering with assistant-only loss (see chat_template.h). */
#include "data/chat_template.h"

#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "data/labeled.h"

static const char *const chatml_tokens[] = {"<|im_start|>", "<|im_end|>"};
static const char *const llama3_tokens[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                            "<|eot_id|>"};

const char *qlt_chat_template_name(qlt_chat_template t) { return qlt_config_enum_text("data.chat_template", t); }

static int check_tokens(const qlt_tokenizer *tok, const char *name, const char *const *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (qlt_tokenizer_token_id(tok, tokens[i]) < 0)
            return qlt_fail("data.chat_template: %s needs the token %s, which the tokenizer does not have (set "
                            "data.chat_template to the model's template: chatml for Qwen, llama3 for Llama-3)",
                            name, tokens[i]);
    return 0;
}

int qlt_chat_template_resolve(qlt_chat_template choice, const qlt_tokenizer *tok, qlt_chat_template *out) {
    if (choice == QLT_CHAT_TEMPLATE_AUTO) {
        /* the template the tokenizer's configuration names first, then the special tokens it has */
        const char *named = qlt_tokenizer_chat_template(tok);
        if (named) choice = strcmp(named, "chatml") == 0 ? QLT_CHAT_TEMPLATE_CHATML : QLT_CHAT_TEMPLATE_LLAMA3;
        else if (qlt_tokenizer_token_id(tok, "<|im_start|>") >= 0) choice = QLT_CHAT_TEMPLATE_CHATML;
        else if (qlt_tokenizer_token_id(tok, "<|start_header_id|>") >= 0) choice = QLT_CHAT_TEMPLATE_LLAMA3;
        else
            return qlt_fail("data.chat_template: auto found neither <|im_start|> (chatml) nor <|start_header_id|> "
                            "(llama3) in the tokenizer; data.format: chat needs one of these templates");
    }
    if (choice == QLT_CHAT_TEMPLATE_CHATML) {
        *out = choice;
        return check_tokens(tok, "chatml", chatml_tokens, 2);
    }
    if (choice == QLT_CHAT_TEMPLATE_LLAMA3) {
        *out = choice;
        return check_tokens(tok, "llama3", llama3_tokens, 4);
    }
    return qlt_fail("data.chat_template = %d: not a template (use auto, chatml or llama3)", (int)choice);
}

/* Python's str.isspace() (what Jinja's `trim` strips), over Unicode code points. */
static int is_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The code point of the UTF-8 sequence at s (n bytes of it), its length in *len; a byte that starts no
 * sequence stands for itself (the encoder rejects invalid UTF-8 later). */
static uint32_t code_point(const unsigned char *s, size_t n, size_t *len) {
    size_t k = s[0] < 0x80 ? 1 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 1;
    if (k > n) k = 1;
    uint32_t c = k == 1 ? (s[0] < 0x80 ? s[0] : 0xfffd) : s[0] & (0x7f >> k);
    for (size_t i = 1; i < k; i++) c = (c << 6) | (s[i] & 0x3f);
    *len = k;
    return c;
}

/* content with leading and trailing white space removed, as the Llama-3 template's `message['content'] | trim`
 * renders it: *len bytes from the returned pointer. */
static const char *trimmed(const char *content, size_t *len) {
    const unsigned char *s = (const unsigned char *)content;
    size_t n = strlen(content), k;
    while (n > 0 && is_py_space(code_point(s, n, &k))) {
        s += k;
        n -= k;
    }
    while (n > 0) {
        size_t start = n - 1;
        while (start > 0 && n - start < 4 && (s[start] & 0xc0) == 0x80) start--;
        if (!is_py_space(code_point(s + start, n - start, &k)) || start + k != n) break;
        n = start;
    }
    *len = n;
    return (const char *)s;
}

int qlt_chat_encode(qlt_chat_template t, const qlt_tokenizer *tok, qlt_encoder *enc, const qlt_chat_message *msgs,
                    int n_msgs, int train_all, qlt_ids *ids, qlt_ids *labels) {
    if (t == QLT_CHAT_TEMPLATE_CHATML) {
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
        size_t len;
        const char *content = trimmed(msgs[m].content, &len);
        QLT_TRY(qlt_labeled_span(enc, content, len, train, ids, labels));
        qlt_labeled_push(ids, labels, eot, train);
    }
    return 0;
}

int qlt_chat_encode_prompt(qlt_chat_template t, const qlt_tokenizer *tok, qlt_encoder *enc,
                           const qlt_chat_message *msgs, int n_msgs, qlt_ids *ids) {
    qlt_ids labels = {0};
    int rc = qlt_chat_encode(t, tok, enc, msgs, n_msgs, 1, ids, &labels);
    if (rc == 0 && t == QLT_CHAT_TEMPLATE_CHATML) {
        qlt_labeled_push(ids, &labels, qlt_tokenizer_token_id(tok, "<|im_start|>"), 1);
        rc = qlt_labeled_text(enc, "assistant\n", 1, ids, &labels);
    } else if (rc == 0) {
        qlt_labeled_push(ids, &labels, qlt_tokenizer_token_id(tok, "<|start_header_id|>"), 1);
        rc = qlt_labeled_text(enc, "assistant", 1, ids, &labels);
        qlt_labeled_push(ids, &labels, qlt_tokenizer_token_id(tok, "<|end_header_id|>"), 1);
        if (rc == 0) rc = qlt_labeled_text(enc, "\n\n", 1, ids, &labels);
    }
    qlt_ids_free(&labels);
    return rc;
}

int32_t qlt_chat_end_of_turn(qlt_chat_template t, const qlt_tokenizer *tok) {
    return qlt_tokenizer_token_id(tok, t == QLT_CHAT_TEMPLATE_CHATML ? "<|im_end|>" : "<|eot_id|>");
}
