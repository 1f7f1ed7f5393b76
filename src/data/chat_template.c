/* chat_template.c: chatml, llama3, mistral and phi3 rendering with assistant-only loss (see chat_template.h). */
#include "data/chat_template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/chat_template_gemma.h"
#include "data/labeled.h"

static const char *const chatml_tokens[] = {"<|im_start|>", "<|im_end|>"};
static const char *const llama3_tokens[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                            "<|eot_id|>"};
static const char *const mistral_tokens[] = {"<s>", "</s>"}; /* [INST] / [/INST]: tokens in V2 and later only */
static const char *const phi3_tokens[] = {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};

const char *qlt_chat_template_name(qlt_chat_template t) { return qlt_config_enum_text("data.chat_template", t); }

static int check_tokens(const qlt_tokenizer *tok, const char *name, const char *const *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (qlt_tokenizer_token_id(tok, tokens[i]) < 0)
            return qlt_fail("data.chat_template: %s needs the token %s, which the tokenizer does not have (set "
                            "data.chat_template to the model's template: chatml for Qwen, llama3 for Llama-3, mistral "
                            "for Mistral, phi3 for Phi-3, gemma for Gemma)",
                            name, tokens[i]);
    return 0;
}

int qlt_chat_template_resolve(qlt_chat_template choice, const qlt_tokenizer *tok, qlt_chat_template *out) {
    if (choice == QLT_CHAT_TEMPLATE_AUTO) {
        /* the template the tokenizer's configuration names first, then the special tokens it has */
        static const struct {
            const char *name, *token;
            qlt_chat_template t;
        } known[] = {{"chatml", "<|im_start|>", QLT_CHAT_TEMPLATE_CHATML},
                     {"llama3", "<|start_header_id|>", QLT_CHAT_TEMPLATE_LLAMA3},
                     {"mistral", "[INST]", QLT_CHAT_TEMPLATE_MISTRAL},
                     {"phi3", "<|user|>", QLT_CHAT_TEMPLATE_PHI3},
                     {"gemma", "<start_of_turn>", QLT_CHAT_TEMPLATE_GEMMA}};
        const char *named = qlt_tokenizer_chat_template(tok);
        for (size_t i = 0; i < sizeof known / sizeof known[0] && choice == QLT_CHAT_TEMPLATE_AUTO; i++)
            if (named && strcmp(named, known[i].name) == 0) choice = known[i].t;
        for (size_t i = 0; i < sizeof known / sizeof known[0] && choice == QLT_CHAT_TEMPLATE_AUTO && !named; i++)
            if (qlt_tokenizer_token_id(tok, known[i].token) >= 0) choice = known[i].t;
        if (choice == QLT_CHAT_TEMPLATE_AUTO)
            return qlt_fail("data.chat_template: auto found none of <|im_start|> (chatml), <|start_header_id|> "
                            "(llama3), [INST] (mistral), <|user|> (phi3), <start_of_turn> (gemma) in the tokenizer or "
                            "its chat template; set "
                            "data.chat_template to one of them");
    }
    /* the special tokens each template emits by id */
    static const struct {
        const char *const *tokens;
        int n;
    } needs[QLT_CHAT_TEMPLATE_COUNT] = {[QLT_CHAT_TEMPLATE_CHATML] = {chatml_tokens, 2},
                                        [QLT_CHAT_TEMPLATE_LLAMA3] = {llama3_tokens, 4},
                                        [QLT_CHAT_TEMPLATE_MISTRAL] = {mistral_tokens, 2},
                                        [QLT_CHAT_TEMPLATE_PHI3] = {phi3_tokens, 4},
                                        [QLT_CHAT_TEMPLATE_GEMMA] = {qlt_chat_gemma_tokens, 3}};
    if (choice <= QLT_CHAT_TEMPLATE_AUTO || choice >= QLT_CHAT_TEMPLATE_COUNT || !needs[choice].tokens)
        return qlt_fail("data.chat_template = %d: not a template (use auto, chatml, llama3, mistral, phi3 or gemma)",
                        (int)choice);
    *out = choice;
    return check_tokens(tok, qlt_chat_template_name(choice), needs[choice].tokens, needs[choice].n);
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

const char *qlt_chat_trim(const char *content, size_t *len) {
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

/* [INST] or [/INST]: by id where the tokenizer has it (V2 and later), else as text (V1). */
static int mistral_mark(const qlt_tokenizer *tok, qlt_encoder *enc, const char *mark, int train, qlt_ids *ids,
                        qlt_ids *labels) {
    int32_t id = qlt_tokenizer_token_id(tok, mark);
    if (id >= 0) {
        qlt_labeled_push(ids, labels, id, train);
        return 0;
    }
    return qlt_labeled_text(enc, mark, train, ids, labels);
}

static int mistral_encode(const qlt_tokenizer *tok, qlt_encoder *enc, const qlt_chat_message *msgs, int n_msgs,
                          int train_all, qlt_ids *ids, qlt_ids *labels) {
    const int v1 = qlt_tokenizer_token_id(tok, "[INST]") < 0; /* no [INST] token: pieces without spaces */
    const char *system = NULL;
    qlt_labeled_push(ids, labels, qlt_tokenizer_token_id(tok, "<s>"), train_all);
    for (int m = 0; m < n_msgs; m++) {
        const char *role = msgs[m].role;
        if (strcmp(role, "system") == 0) {
            system = msgs[m].content;
            continue;
        }
        int user = strcmp(role, "user") == 0;
        if (!user && strcmp(role, "assistant") != 0)
            return qlt_fail("data.chat_template mistral: message %d has role '%s'; Mistral's template knows system, "
                            "user and assistant", m, role);
        int train = train_all || !user;
        if (user) QLT_TRY(mistral_mark(tok, enc, "[INST]", train_all, ids, labels));
        /* " CONTENT" (V2+), or CONTENT alone when the normalizer puts the space (V1); system + "\n\n" first */
        size_t n = strlen(msgs[m].content) + (system && user ? strlen(system) + 2 : 0) + 2;
        char *text = qlt_xmalloc(n);
        snprintf(text, n, "%s%s%s%s", v1 ? "" : " ", system && user ? system : "", system && user ? "\n\n" : "",
                 msgs[m].content);
        if (user) system = NULL;
        int rc = qlt_labeled_text(enc, text, train, ids, labels);
        free(text);
        QLT_TRY(rc);
        if (user) QLT_TRY(mistral_mark(tok, enc, "[/INST]", train_all, ids, labels));
        else qlt_labeled_push(ids, labels, qlt_tokenizer_token_id(tok, "</s>"), train);
    }
    return 0;
}

static int phi3_encode(const qlt_tokenizer *tok, qlt_encoder *enc, const qlt_chat_message *msgs, int n_msgs,
                       int train_all, qlt_ids *ids, qlt_ids *labels) {
    int32_t end = qlt_tokenizer_token_id(tok, "<|end|>");
    for (int m = 0; m < n_msgs; m++) {
        char header[32];
        snprintf(header, sizeof header, "<|%.20s|>", msgs[m].role);
        int32_t id = qlt_tokenizer_token_id(tok, header);
        if (strlen(msgs[m].role) > 20 || id < 0 ||
            (strcmp(msgs[m].role, "system") && strcmp(msgs[m].role, "user") && strcmp(msgs[m].role, "assistant")))
            return qlt_fail("data.chat_template phi3: message %d has role '%s'; Phi-3's template knows system, user "
                            "and assistant", m, msgs[m].role);
        int train = train_all || strcmp(msgs[m].role, "assistant") == 0;
        qlt_labeled_push(ids, labels, id, train_all);
        QLT_TRY(qlt_labeled_text(enc, "\n", train_all, ids, labels));
        QLT_TRY(qlt_labeled_text(enc, msgs[m].content, train, ids, labels));
        qlt_labeled_push(ids, labels, end, train);
        QLT_TRY(qlt_labeled_text(enc, "\n", train_all, ids, labels));
    }
    return 0;
}

int qlt_chat_encode(qlt_chat_template t, const qlt_tokenizer *tok, qlt_encoder *enc, const qlt_chat_message *msgs,
                    int n_msgs, int train_all, qlt_ids *ids, qlt_ids *labels) {
    if (t == QLT_CHAT_TEMPLATE_MISTRAL) return mistral_encode(tok, enc, msgs, n_msgs, train_all, ids, labels);
    if (t == QLT_CHAT_TEMPLATE_PHI3) return phi3_encode(tok, enc, msgs, n_msgs, train_all, ids, labels);
    if (t == QLT_CHAT_TEMPLATE_GEMMA) return qlt_chat_gemma_encode(tok, enc, msgs, n_msgs, train_all, ids, labels);
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
        const char *content = qlt_chat_trim(msgs[m].content, &len);
        QLT_TRY(qlt_labeled_span(enc, content, len, train, ids, labels));
        qlt_labeled_push(ids, labels, eot, train);
    }
    return 0;
}

int qlt_chat_encode_prompt(qlt_chat_template t, const qlt_tokenizer *tok, qlt_encoder *enc,
                           const qlt_chat_message *msgs, int n_msgs, qlt_ids *ids) {
    qlt_ids labels = {0};
    int rc = qlt_chat_encode(t, tok, enc, msgs, n_msgs, 1, ids, &labels);
    if (t == QLT_CHAT_TEMPLATE_MISTRAL) {
        /* the prompt ends in [/INST]: the assistant's turn needs no header */
    } else if (rc == 0 && t == QLT_CHAT_TEMPLATE_GEMMA) {
        rc = qlt_chat_gemma_prompt_tail(tok, enc, ids, &labels);
    } else if (rc == 0 && t == QLT_CHAT_TEMPLATE_PHI3) {
        qlt_labeled_push(ids, &labels, qlt_tokenizer_token_id(tok, "<|assistant|>"), 1);
        rc = qlt_labeled_text(enc, "\n", 1, ids, &labels);
    } else if (rc == 0 && t == QLT_CHAT_TEMPLATE_CHATML) {
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
    static const char *const end[QLT_CHAT_TEMPLATE_COUNT] = {
        [QLT_CHAT_TEMPLATE_CHATML] = "<|im_end|>", [QLT_CHAT_TEMPLATE_LLAMA3] = "<|eot_id|>",
        [QLT_CHAT_TEMPLATE_MISTRAL] = "</s>", [QLT_CHAT_TEMPLATE_PHI3] = "<|end|>",
        [QLT_CHAT_TEMPLATE_GEMMA] = "<end_of_turn>"};
    return t > QLT_CHAT_TEMPLATE_AUTO && t < QLT_CHAT_TEMPLATE_COUNT ? qlt_tokenizer_token_id(tok, end[t]) : -1;
}
