/* fuzz_dataset_line.c: libFuzzer harness for a dataset file (src/data/jsonl.c, src/data/dataset_format.c):
 * the first byte picks data.format (text, completion, alpaca, chat, tokens: (byte & 7) % 5), the chat template
 * (bit 3: llama3, else chatml), data.train_on_prompt (bit 4) and whether the file is named .jsonl.gz (bit 5);
 * the rest is the file. Each line goes through qlt_example_parse as qlt_dataset_build would send it, with
 * the fixtures' Qwen2- and Llama-3-style tokenizers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "data/dataset_internal.h"
#include "data/jsonl.h"
#include "fuzz_util.h"

static qlt_tokenizer *g_tok[2]; /* chatml (tok-qwen2style), llama3 (tok-llama3style) */
static qlt_encoder *g_enc[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    g_tok[0] = fuzz_fixture_tokenizer("tok-qwen2style", 0);
    g_tok[1] = fuzz_fixture_tokenizer("tok-llama3style", 1);
    for (int i = 0; i < 2; i++) g_enc[i] = qlt_encoder_new(g_tok[i]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t sel = data[0];
    int llama3 = (sel >> 3) & 1;
    qlt_example_ctx c = {
        .format = (qlt_data_format)((sel & 7) % QLT_DATA_FORMAT_COUNT),
        .tok = g_tok[llama3],
        .enc = g_enc[llama3],
        .chat = llama3 ? QLT_CHAT_TEMPLATE_LLAMA3 : QLT_CHAT_TEMPLATE_CHATML,
        .train_all = (sel >> 4) & 1,
        .eos = qlt_tokenizer_eos_id(g_tok[llama3]),
    };
    if (c.format == QLT_DATA_FORMAT_TOKENS) c.tok = NULL, c.enc = NULL;
    const char *name = (sel >> 5) & 1 ? "data.jsonl.gz" : "data.jsonl";
    char *path = fuzz_write(name, data + 1, size - 1);
    qlt_jsonl *r;
    int rc = qlt_jsonl_open(&r, path);
    fuzz_check_error(rc);
    if (rc == 0) {
        qlt_ids ids = {0}, labels = {0};
        const char *line;
        size_t len;
        while ((rc = qlt_jsonl_next(r, &line, &len)) == 1) {
            int prc = qlt_example_parse(&c, line, len, &ids, &labels);
            fuzz_check_error(prc);
            if (ids.len != labels.len) abort();
        }
        fuzz_check_error(rc == 0 ? 0 : -1);
        free(ids.data);
        free(labels.data);
        qlt_jsonl_close(r);
    }
    free(path);
    return 0;
}
