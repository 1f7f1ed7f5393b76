/* dataset_format.c: one JSONL line -> one example (ids + labels), per data.format (documented in
 * docs/DATA.md):
 *   text        {"text"}                          encode(text) + EOS, all trained
 *   completion  {"prompt", "completion"}          prompt masked; completion + EOS trained
 *   alpaca      {"instruction", "input"?, "output"} Alpaca prompt masked; output + EOS trained
 *   chat        {"messages": [{"role", "content"}]} chat template, assistant turns trained
 *   tokens      {"input_ids": [...], "labels"?: [...]} as given (labels default to input_ids)
 * data.train_on_prompt trains every token. Errors say which field is missing or of which wrong type. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/whole_number.h"
#include "data/dataset_internal.h"
#include "data/labeled.h"

#define ALPACA_WITH_INPUT                                                                                    \
    "Below is an instruction that describes a task, paired with an input that provides further context. "  \
    "Write a response that appropriately completes the request.\n\n### Instruction:\n%s\n\n### Input:\n%s\n\n" \
    "### Response:\n"
#define ALPACA_NO_INPUT                                                                                      \
    "Below is an instruction that describes a task. Write a response that appropriately completes the "     \
    "request.\n\n### Instruction:\n%s\n\n### Response:\n"

/* The string field `key`: required (must exist, be a string, and when nonempty_required, not be ""). */
static int string_field(const cJSON *obj, const char *key, int nonempty_required, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return qlt_fail("missing field \"%s\"", key);
    if (!cJSON_IsString(v)) return qlt_fail("field \"%s\" must be a string", key);
    if (nonempty_required && !v->valuestring[0]) return qlt_fail("field \"%s\" is empty", key);
    *out = v->valuestring;
    return 0;
}

static int int_array(const cJSON *v, const char *key, int allow_ignore, qlt_ids *out) {
    if (!cJSON_IsArray(v)) return qlt_fail("field \"%s\" must be an array of integers", key);
    int64_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        double d = e->valuedouble;
        if (!cJSON_IsNumber(e) || !qlt_is_int32(d) || (d < 0 && !(allow_ignore && d == QLT_IGNORE_LABEL)))
            return qlt_fail("field \"%s\"[%lld] is not a valid token id", key, (long long)i);
        qlt_ids_push(out, (int32_t)d);
    }
    if (i == 0) return qlt_fail("field \"%s\" is empty", key);
    return 0;
}

static int parse_tokens(const cJSON *obj, qlt_ids *ids, qlt_ids *labels) {
    int64_t start = ids->len;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(obj, "input_ids");
    if (!in) return qlt_fail("missing field \"input_ids\"");
    QLT_TRY(int_array(in, "input_ids", 0, ids));
    const cJSON *lab = cJSON_GetObjectItemCaseSensitive(obj, "labels");
    if (!lab || cJSON_IsNull(lab)) {
        qlt_ids_reserve(labels, ids->len - start);
        for (int64_t i = start; i < ids->len; i++) labels->data[labels->len++] = ids->data[i];
        return 0;
    }
    int64_t lstart = labels->len;
    QLT_TRY(int_array(lab, "labels", 1, labels));
    if (labels->len - lstart != ids->len - start)
        return qlt_fail("\"labels\" has %lld entries but \"input_ids\" has %lld", (long long)(labels->len - lstart),
                        (long long)(ids->len - start));
    return 0;
}

static int parse_chat(const qlt_example_ctx *c, const cJSON *obj, qlt_ids *ids, qlt_ids *labels) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(obj, "messages");
    if (!msgs) return qlt_fail("missing field \"messages\"");
    if (!cJSON_IsArray(msgs)) return qlt_fail("field \"messages\" must be an array of {\"role\", \"content\"}");
    int n = cJSON_GetArraySize(msgs);
    if (n == 0) return qlt_fail("field \"messages\" is empty");
    qlt_chat_message *list = qlt_xmalloc((size_t)n * sizeof *list);
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        if (!cJSON_IsObject(m)) { /* a fresh message: there is no field error to put context on */
            free(list);
            return qlt_fail("messages[%d] is not a {\"role\", \"content\"} object", i);
        }
        if (string_field(m, "role", 1, &list[i].role) != 0 || string_field(m, "content", 0, &list[i].content) != 0) {
            free(list);
            return qlt_fail_context("messages[%d]", i);
        }
    }
    int r = qlt_chat_encode(c->chat, c->tok, c->enc, list, n, c->train_all, ids, labels);
    free(list);
    return r;
}

static int parse_object(const qlt_example_ctx *c, const cJSON *obj, qlt_ids *ids, qlt_ids *labels) {
    const char *a, *b;
    switch (c->format) {
    case QLT_DATA_FORMAT_TOKENS:
        return parse_tokens(obj, ids, labels);
    case QLT_DATA_FORMAT_CHAT:
        return parse_chat(c, obj, ids, labels);
    case QLT_DATA_FORMAT_TEXT:
        QLT_TRY(string_field(obj, "text", 1, &a));
        QLT_TRY(qlt_labeled_text(c->enc, a, 1, ids, labels));
        break;
    case QLT_DATA_FORMAT_COMPLETION:
        QLT_TRY(string_field(obj, "prompt", 0, &a));
        QLT_TRY(string_field(obj, "completion", 1, &b));
        QLT_TRY(qlt_labeled_text(c->enc, a, c->train_all, ids, labels));
        QLT_TRY(qlt_labeled_text(c->enc, b, 1, ids, labels));
        break;
    case QLT_DATA_FORMAT_ALPACA: {
        const char *out, *input = "";
        QLT_TRY(string_field(obj, "instruction", 1, &a));
        QLT_TRY(string_field(obj, "output", 1, &out));
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(obj, "input");
        if (in && !cJSON_IsNull(in)) QLT_TRY(string_field(obj, "input", 0, &input));
        size_t n = strlen(a) + strlen(input) + sizeof ALPACA_WITH_INPUT;
        char *prompt = qlt_xmalloc(n);
        if (input[0]) snprintf(prompt, n, ALPACA_WITH_INPUT, a, input);
        else snprintf(prompt, n, ALPACA_NO_INPUT, a);
        int r = qlt_labeled_text(c->enc, prompt, c->train_all, ids, labels);
        free(prompt);
        QLT_TRY(r);
        QLT_TRY(qlt_labeled_text(c->enc, out, 1, ids, labels));
        break;
    }
    case QLT_DATA_FORMAT_COUNT: return qlt_fail("data.format: not a format (%d)", (int)c->format);
    }
    qlt_labeled_push(ids, labels, c->eos, 1);
    return 0;
}

/* The data.format whose fields a record has (chat, tokens, alpaca, completion, text, checked in that order),
 * or -1 when it fits none. */
static int format_of_keys(const cJSON *obj) {
#define HAS(k) (cJSON_GetObjectItemCaseSensitive(obj, k) != NULL)
    if (HAS("messages")) return QLT_DATA_FORMAT_CHAT;
    if (HAS("input_ids")) return QLT_DATA_FORMAT_TOKENS;
    if (HAS("instruction") && HAS("output")) return QLT_DATA_FORMAT_ALPACA;
    if (HAS("prompt") && HAS("completion")) return QLT_DATA_FORMAT_COMPLETION;
    if (HAS("text")) return QLT_DATA_FORMAT_TEXT;
    return -1;
#undef HAS
}

/* A field the format needs is missing: says what the line looks like (its keys) and, when its keys fit another
 * data.format, which one ("missing field \"messages\"; the line has key \"text\": use data.format: text"). */
static int explain_mismatch(const qlt_example_ctx *c, const cJSON *obj) {
    char keys[256] = "";
    size_t n = 0;
    int count = 0;
    for (const cJSON *k = obj->child; k && n < sizeof keys - 40; k = k->next, count++)
        n += (size_t)snprintf(keys + n, sizeof keys - n, "%s\"%.24s\"", count ? ", " : "", k->string ? k->string : "");
    if (obj->child && n >= sizeof keys - 40) snprintf(keys + n, sizeof keys - n, ", ...");
    int fits = format_of_keys(obj);
    char *why = qlt_xstrdup(qlt_error());
    if (fits >= 0 && fits != (int)c->format)
        qlt_fail("%s; the line has key%s %s: use data.format: %s", why, count == 1 ? "" : "s", keys,
                 qlt_config_enum_text("data.format", fits));
    else
        qlt_fail("%s; the line has %s%s", why, count ? (count == 1 ? "key " : "keys ") : "no keys", keys);
    free(why);
    return -1;
}

int qlt_example_parse(const qlt_example_ctx *c, const char *line, size_t len, qlt_ids *ids, qlt_ids *labels) {
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
    if (i == len) return qlt_fail("empty line (one JSON object a line)");
    const char *end = NULL;
    cJSON *obj = cJSON_ParseWithLengthOpts(line, len, &end, 0);
    if (!obj) {
        size_t col = end && end >= line && end <= line + len ? (size_t)(end - line) + 1 : 0;
        return qlt_fail("not valid JSON (near column %zu)", col);
    }
    if (!cJSON_IsObject(obj)) {
        cJSON_Delete(obj);
        return qlt_fail("not a JSON object");
    }
    /* cJSON stops after the first value; anything but blanks after it (two objects run together on one line)
     * would otherwise be dropped without a word */
    size_t rest = end && end >= line && end <= line + len ? (size_t)(end - line) : len;
    while (rest < len && (line[rest] == ' ' || line[rest] == '\t')) rest++;
    if (rest < len) {
        cJSON_Delete(obj);
        return qlt_fail("text after the JSON object (near column %zu): one JSON object a line", rest + 1);
    }
    int64_t ids_start = ids->len, labels_start = labels->len;
    int r = parse_object(c, obj, ids, labels);
    if (r != 0 && !strncmp(qlt_error(), "missing field", 13)) explain_mismatch(c, obj);
    cJSON_Delete(obj);
    if (r != 0) {
        ids->len = ids_start;
        labels->len = labels_start;
    }
    return r;
}
