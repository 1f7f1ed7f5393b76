/* fuzz_chat_template.c: libFuzzer harness for the chat template path (src/tokenizer apply_config,
 * src/data/chat_template.c): the input is tokenizer_config.json (its chat_template, eos and pad tokens), then
 * after a "\n--8<--\n" line a chat dataset line. The config is applied to a Llama-3-style tokenizer when it
 * mentions <|start_header_id|>, else to a Qwen2-style one; data.chat_template auto resolves against it, and
 * the line is rendered with the template found. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/chat_template.h"
#include "data/dataset_internal.h"
#include "fuzz_util.h"

static qlt_tokenizer *g_tok[2];
static qlt_encoder *g_enc[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    g_tok[0] = fuzz_fixture_tokenizer("tok-qwen2style", 0);
    g_tok[1] = fuzz_fixture_tokenizer("tok-llama3style", 1);
    for (int i = 0; i < 2; i++) g_enc[i] = qlt_encoder_new(g_tok[i]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *parts[2];
    size_t lens[2];
    int n = fuzz_split(data, size, parts, lens, 2);
    char *cfg = malloc(lens[0] + 1);
    memcpy(cfg, parts[0], lens[0]);
    cfg[lens[0]] = 0;
    int which = strstr(cfg, "<|start_header_id|>") != NULL;
    qlt_tokenizer *tok = g_tok[which];
    int rc = qlt_tokenizer_apply_config(tok, cfg, "fuzz/tokenizer_config.json");
    fuzz_check_error(rc);
    free(cfg);
    qlt_chat_template t;
    if (rc == 0) {
        rc = qlt_chat_template_resolve(QLT_CHAT_TEMPLATE_AUTO, tok, &t);
        fuzz_check_error(rc);
    }
    if (rc == 0 && n > 1) {
        qlt_example_ctx c = {.format = QLT_DATA_FORMAT_CHAT, .tok = tok, .enc = g_enc[which], .chat = t,
                             .eos = qlt_tokenizer_eos_id(tok)};
        qlt_ids ids = {0}, labels = {0};
        fuzz_check_error(qlt_example_parse(&c, (const char *)parts[1], lens[1], &ids, &labels));
        if (ids.len != labels.len) abort();
        free(ids.data);
        free(labels.data);
    }
    return 0;
}
