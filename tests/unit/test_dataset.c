/* test_dataset.c: every data.format's masking on hand-checked examples (ids from the tok-qwen2style
 * fixture), packing / padding / truncation layout, bad lines named by file:line (or skipped and
 * counted), .jsonl.gz input, the cache (hit, miss, corruption), the same rows for any thread count, and
 * the eval split. The attention-isolation proof is in test_dataset_attention.c. */
#define _GNU_SOURCE /* asprintf */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "data/dataset.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

#define TOK QLT_TEST_DATA "/fixtures/tok-qwen2style/tokenizer.json"
#define TOK_LLAMA3 QLT_SHARED_DIR "/assets/tokenizers/llama3/tokenizer.json"
#define X (-100)
#define EOS 3000
/* tok-qwen2style ids: "Hello" 39 422 323, " world" 2025 1734, "Hi" 39 72, "Yo" 56 78, "user" 1769,
 * "assistant" 337 322 733, "\n" 198, <|endoftext|> 3000, <|im_start|> 3001, <|im_end|> 3002 */

static char *tmpdir; /* a fresh test_tmpdir() per test */

static void make_tmpdir(void) { tmpdir = test_tmpdir(); }

static void remove_tmpdir(void) {
    cr_assert_eq(qlt_remove_tree(tmpdir), 0, "%s", qlt_error());
    free(tmpdir);
}

TestSuite(dataset, .init = make_tmpdir, .fini = remove_tmpdir);

/* Writes content to <tmpdir>/<name>; returns the path (heap). */
static char *write_file(const char *name, const char *content) {
    char *path = qlt_path_join(tmpdir, name);
    test_write_text(path, content);
    return path;
}

static qlt_config make_cfg(qlt_data_format format, int seq_len, int packing) {
    qlt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.data.format = format;
    cfg.data.seq_len = seq_len;
    cfg.data.packing = packing;
    cfg.data.tokenizer = (char *)TOK;
    cfg.data.chat_template = QLT_CHAT_TEMPLATE_AUTO;
    cfg.data.threads = 1;
    return cfg;
}

static void build_ok(qlt_dataset *ds, const qlt_config *cfg, const char *path) {
    qlt_path_list files = {1, {(char *)path}};
    cr_assert_eq(qlt_dataset_build(ds, cfg, &files, NULL, NULL), 0, "%s", qlt_error());
}

static void expect_row(const qlt_dataset *ds, int64_t row, const int32_t *ids, const int32_t *labels,
                       const int32_t *seg) {
    for (int t = 0; t < ds->seq_len; t++) {
        int64_t i = row * ds->seq_len + t;
        cr_assert_eq(ds->input_ids[i], ids[t], "row %lld t %d: id %d want %d", (long long)row, t, ds->input_ids[i], ids[t]);
        cr_assert_eq(ds->labels[i], labels[t], "row %lld t %d: label %d want %d", (long long)row, t, ds->labels[i],
                     labels[t]);
        if (seg)
            cr_assert_eq(ds->seg_start[i], seg[t], "row %lld t %d: seg_start %d want %d", (long long)row, t,
                         ds->seg_start[i], seg[t]);
    }
}

Test(dataset, text_packed) {
    char *path = write_file("a.jsonl", "{\"text\": \"Hello world\"}\n{\"text\": \"Hi\"}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 8, 1);
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    cr_assert_eq(ds.n_rows, 2);
    /* example 1 (6 tokens), example 2 starts at 6 and continues into row 1 as a new segment */
    expect_row(&ds, 0, (int32_t[]){39, 422, 323, 2025, 1734, EOS, 39, 72},
               (int32_t[]){X, 422, 323, 2025, 1734, EOS, X, 72}, (int32_t[]){0, 0, 0, 0, 0, 0, 6, 6});
    expect_row(&ds, 1, (int32_t[]){EOS, EOS, EOS, EOS, EOS, EOS, EOS, EOS}, (int32_t[]){X, X, X, X, X, X, X, X},
               (int32_t[]){0, 1, 1, 1, 1, 1, 1, 1});
    cr_assert_eq(ds.n_examples, 2);
    cr_assert_eq(ds.n_tokens, 9);
    cr_assert_eq(ds.n_label_tokens, 6);
    cr_assert_eq(ds.n_truncated, 0);
    cr_assert_eq(ds.pad_id, EOS);
    /* row 0's second example has a label after its start (72): two examples matter there */
    cr_assert_eq(qlt_dataset_max_row_examples(&ds), 2);
    qlt_dataset_free(&ds);
    free(path);
}

Test(dataset, text_padded) {
    char *path = write_file("a.jsonl", "{\"text\": \"Hello world\"}\n{\"text\": \"Hi\"}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 8, 0);
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    cr_assert_eq(ds.n_rows, 2);
    expect_row(&ds, 0, (int32_t[]){39, 422, 323, 2025, 1734, EOS, EOS, EOS},
               (int32_t[]){X, 422, 323, 2025, 1734, EOS, X, X}, (int32_t[]){0, 0, 0, 0, 0, 0, 6, 6});
    expect_row(&ds, 1, (int32_t[]){39, 72, EOS, EOS, EOS, EOS, EOS, EOS}, (int32_t[]){X, 72, EOS, X, X, X, X, X},
               (int32_t[]){0, 0, 0, 3, 3, 3, 3, 3});
    cr_assert_eq(ds.n_tokens, 9);
    /* the padding is an example of its own, but no loss follows its start: one example a row matters */
    cr_assert_eq(qlt_dataset_max_row_examples(&ds), 1);
    qlt_dataset_free(&ds);
    free(path);
}

/* Which examples' masking matters (qlt_dataset_max_row_examples) on hand-made rows of 6 tokens: an example
 * counts when a label follows its first token (the loss at t predicts labels[t + 1]). */
Test(dataset, max_row_examples_counts_examples_a_loss_follows) {
    int32_t seg[3][6] = {{0, 0, 2, 2, 4, 4}, {0, 0, 2, 2, 4, 4}, {0, 0, 0, 3, 3, 3}};
    int32_t lab[3][6] = {{X, 5, X, 7, X, 9}, /* three examples, each with a label after its start */
                         {X, 5, X, 7, 8, X}, /* the third example's only label is its first token */
                         {X, X, X, X, X, X}}; /* no label at all: the row still holds one example */
    qlt_dataset ds = {.n_rows = 1, .seq_len = 6};
    int want[3] = {3, 2, 1};
    for (int r = 0; r < 3; r++) {
        ds.seg_start = seg[r], ds.labels = lab[r];
        cr_assert_eq(qlt_dataset_max_row_examples(&ds), want[r], "row %d", r);
    }
    ds.n_rows = 3, ds.seg_start = &seg[0][0], ds.labels = &lab[0][0];
    cr_assert_eq(qlt_dataset_max_row_examples(&ds), 3);
    ds.n_rows = 0;
    cr_assert_eq(qlt_dataset_max_row_examples(&ds), 0);
}

Test(dataset, truncation_is_counted) {
    char *path = write_file("a.jsonl", "{\"text\": \"Hello world\"}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 4, 1);
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    cr_assert_eq(ds.n_rows, 1);
    cr_assert_eq(ds.n_truncated, 1);
    expect_row(&ds, 0, (int32_t[]){39, 422, 323, 2025}, (int32_t[]){X, 422, 323, 2025}, (int32_t[]){0, 0, 0, 0});
    qlt_dataset_free(&ds);
    free(path);
}

Test(dataset, completion_masks_the_prompt) {
    char *path = write_file("a.jsonl", "{\"prompt\": \"Hello\", \"completion\": \" world\"}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_COMPLETION, 6, 0);
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    expect_row(&ds, 0, (int32_t[]){39, 422, 323, 2025, 1734, EOS}, (int32_t[]){X, X, X, 2025, 1734, EOS}, NULL);
    cr_assert_eq(ds.n_label_tokens, 3);
    qlt_dataset_free(&ds);
    cfg.data.train_on_prompt = 1;
    build_ok(&ds, &cfg, path);
    expect_row(&ds, 0, (int32_t[]){39, 422, 323, 2025, 1734, EOS}, (int32_t[]){X, 422, 323, 2025, 1734, EOS}, NULL);
    qlt_dataset_free(&ds);
    free(path);
}

static void check_alpaca(const char *line, const char *prompt) {
    char *path = write_file("a.jsonl", line);
    qlt_tokenizer *tok;
    cr_assert_eq(qlt_tokenizer_load(&tok, TOK), 0);
    qlt_ids p = {0};
    cr_assert_eq(qlt_tokenizer_encode(tok, prompt, strlen(prompt), &p), 0);
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_ALPACA, (int)p.len + 3, 0);
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    cr_assert_eq(ds.n_rows, 1);
    for (int64_t i = 0; i < p.len; i++) {
        cr_assert_eq(ds.input_ids[i], p.data[i]);
        cr_assert_eq(ds.labels[i], X, "prompt token %lld must be masked", (long long)i);
    }
    const int32_t tail[3] = {56, 78, EOS};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(ds.input_ids[p.len + i], tail[i]);
        cr_assert_eq(ds.labels[p.len + i], tail[i]);
    }
    qlt_dataset_free(&ds);
    qlt_ids_free(&p);
    qlt_tokenizer_free(tok);
    free(path);
}

Test(dataset, alpaca_masks_the_prompt) {
    check_alpaca("{\"instruction\": \"Hi\", \"input\": \"\", \"output\": \"Yo\"}\n",
                 "Below is an instruction that describes a task. Write a response that appropriately completes the "
                 "request.\n\n### Instruction:\nHi\n\n### Response:\n");
    check_alpaca("{\"instruction\": \"Hi\", \"input\": \"Hello\", \"output\": \"Yo\"}\n",
                 "Below is an instruction that describes a task, paired with an input that provides further "
                 "context. Write a response that appropriately completes the request.\n\n### Instruction:\nHi\n\n"
                 "### Input:\nHello\n\n### Response:\n");
}

Test(dataset, chat_chatml_trains_assistant_turns) {
    char *path = write_file("a.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"},"
                                       " {\"role\": \"assistant\", \"content\": \"Yo\"}]}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_CHAT, 16, 0);
    qlt_dataset ds;
    build_ok(&ds, &cfg, path); /* auto -> chatml (the tokenizer has <|im_start|>) */
    expect_row(&ds, 0, (int32_t[]){3001, 1769, 198, 39, 72, 3002, 198, 3001, 337, 322, 733, 198, 56, 78, 3002, 198},
               (int32_t[]){X, X, X, X, X, X, X, X, X, X, X, X, 56, 78, 3002, X}, NULL);
    qlt_dataset_free(&ds);
    cfg.data.chat_template = QLT_CHAT_TEMPLATE_LLAMA3;
    qlt_path_list files = {1, {path}};
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, NULL), -1);
    cr_assert(strstr(qlt_error(), "<|begin_of_text|>"), "%s", qlt_error());
    free(path);
}

Test(dataset, chat_llama3_trains_assistant_turns) {
    if (!qlt_file_exists(TOK_LLAMA3)) cr_skip_test("../shared/assets/tokenizers/llama3 absent");
    char *path = write_file("a.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"},"
                                       " {\"role\": \"assistant\", \"content\": \"Hello\"}]}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_CHAT, 16, 0);
    cfg.data.tokenizer = (char *)TOK_LLAMA3;
    qlt_dataset ds;
    build_ok(&ds, &cfg, path); /* auto -> llama3 */
    /* <|begin_of_text|> <|start_header_id|> user <|end_header_id|> \n\n Hi <|eot_id|>
     * <|start_header_id|> assistant <|end_header_id|> \n\n Hello <|eot_id|> (pad = <|end_of_text|>) */
    expect_row(&ds, 0,
               (int32_t[]){128000, 128006, 882, 128007, 271, 13347, 128009, 128006, 78191, 128007, 271, 9906, 128009,
                           128001, 128001, 128001},
               (int32_t[]){X, X, X, X, X, X, X, X, X, X, X, 9906, 128009, X, X, X}, NULL);
    qlt_dataset_free(&ds);
    free(path);
}

/* Llama-3's chat template renders message['content'] | trim: white space around the content (Python's
 * str.isspace, Unicode included) is not part of the conversation. */
Test(dataset, chat_llama3_trims_content) {
    if (!qlt_file_exists(TOK_LLAMA3)) cr_skip_test("../shared/assets/tokenizers/llama3 absent");
    char *path = write_file("a.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \" \\tHi\\u3000\\n\"},"
                                       " {\"role\": \"assistant\", \"content\": \"\\n\\nHello \\u00a0\"}]}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_CHAT, 16, 0);
    cfg.data.tokenizer = (char *)TOK_LLAMA3;
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    expect_row(&ds, 0,
               (int32_t[]){128000, 128006, 882, 128007, 271, 13347, 128009, 128006, 78191, 128007, 271, 9906, 128009,
                           128001, 128001, 128001},
               (int32_t[]){X, X, X, X, X, X, X, X, X, X, X, 9906, 128009, X, X, X}, NULL);
    qlt_dataset_free(&ds);
    free(path);
}

#define TOK_MISTRAL QLT_TEST_DATA "/fixtures/tok-mistral/tokenizer.json"

/* Mistral's template with a V1 tokenizer (tok-mistral: [INST] is text, its normalizer prepends the spaces):
 * <s> [INST] SYSTEM\n\nUSER [/INST] ASSISTANT</s> [INST] USER [/INST] ASSISTANT</s>, the system message before
 * the first user message; loss on the assistant's content and </s>. Ids from Hugging Face tokenizers of each
 * piece. auto picks it from a tokenizer_config.json whose chat_template uses [INST]; a role the template does
 * not know is refused. */
Test(dataset, chat_mistral_trains_assistant_turns) {
    char *path = write_file("a.jsonl", "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                                       " {\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": "
                                       "\"Yo\"}, {\"role\": \"user\", \"content\": \"Again\"}, {\"role\": \"assistant\","
                                       " \"content\": \"Ok\"}]}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_CHAT, 36, 0);
    cfg.data.tokenizer = (char *)TOK_MISTRAL;
    cfg.data.chat_template = QLT_CHAT_TEMPLATE_MISTRAL;
    const int32_t ids[36] = {1,    733, 775,  920, 6088, 1739, 287, 4667, 6018, 13,  13,   6064, 6005, 733, 6043, 775, 920, 6088,
                             627,  6004, 2,   733, 775,  920,  6088, 3786, 426, 733, 6043, 775, 920,  6088, 451, 6024, 2, 2};
    int32_t labels[36];
    for (int i = 0; i < 36; i++) labels[i] = X;
    for (int i = 18; i <= 20; i++) labels[i] = ids[i]; /* "Yo" </s> */
    for (int i = 32; i <= 34; i++) labels[i] = ids[i]; /* "Ok" </s> */
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    expect_row(&ds, 0, ids, labels, NULL);
    qlt_dataset_free(&ds);
    /* auto: the tokenizer has no [INST] token; its chat template names it */
    char *tok = qlt_path_join(tmpdir, "tokenizer.json"), *tcfg = qlt_path_join(tmpdir, "tokenizer_config.json");
    char *text;
    cr_assert_eq(qlt_read_file(TOK_MISTRAL, &text, NULL), 0);
    test_write_text(tok, text);
    free(text);
    cfg.data.tokenizer = tok;
    cfg.data.chat_template = QLT_CHAT_TEMPLATE_AUTO;
    qlt_path_list files = {1, {path}};
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, NULL), -1);
    cr_assert(strstr(qlt_error(), "[INST] (mistral)"), "%s", qlt_error());
    test_write_text(tcfg, "{\"chat_template\": \"{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
                          "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% else %}{{ m['content'] + eos_token }}{% endif %}"
                          "{% endfor %}\"}");
    build_ok(&ds, &cfg, path);
    expect_row(&ds, 0, ids, labels, NULL);
    qlt_dataset_free(&ds);
    free(path);
    path = write_file("b.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"tool\", "
                                 "\"content\": \"Yo\"}]}\n");
    files.items[0] = path;
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, NULL), -1);
    cr_assert(strstr(qlt_error(), "role 'tool'"), "%s", qlt_error());
    free(path);
    free(tok);
    free(tcfg);
}

/* Phi-3's template: <|ROLE|>\nCONTENT<|end|>\n per message, loss on the assistant's content and <|end|>. The
 * tokenizer is tok-qwen2style with Phi-3's four tokens added (3003..3006); it also has <|im_start|>, so auto
 * takes phi3 only from tokenizer_config.json's template. Ids from Hugging Face tokenizers of the whole text. */
Test(dataset, chat_phi3_trains_assistant_turns) {
    char *text, *tok = qlt_path_join(tmpdir, "tokenizer.json"), *tcfg = qlt_path_join(tmpdir, "tokenizer_config.json");
    cr_assert_eq(qlt_read_file(TOK, &text, NULL), 0);
    char *at = strstr(text, "\"content\": \"<|im_end|>\"");
    cr_assert(at);
    at = strstr(at, "}");
    *at = '\0';
    char *edited;
    cr_assert(asprintf(&edited, "%s}, {\"id\": 3003, \"content\": \"<|system|>\", \"special\": true}, {\"id\": 3004, "
                                "\"content\": \"<|user|>\", \"special\": true}, {\"id\": 3005, \"content\": "
                                "\"<|assistant|>\", \"special\": true}, {\"id\": 3006, \"content\": \"<|end|>\", "
                                "\"special\": true}%s", text, at + 1) > 0);
    test_write_text(tok, edited);
    free(edited);
    free(text);
    test_write_text(tcfg, "{\"chat_template\": \"{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + "
                          "message['content'] + '<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}"
                          "{% else %}{{ eos_token }}{% endif %}\"}");
    char *path = write_file("a.jsonl", "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                                       " {\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": "
                                       "\"Yo\"}]}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_CHAT, 24, 0);
    cfg.data.tokenizer = tok;
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    const int32_t ids[24] = {3003, 198, 33,  68,  307, 360, 68, 69, 13,   3006, 198, 3004,
                             198,  39,  72,  3006, 198, 3005, 198, 56, 78, 3006, 198, EOS};
    int32_t labels[24];
    for (int i = 0; i < 24; i++) labels[i] = X;
    for (int i = 19; i <= 21; i++) labels[i] = ids[i]; /* "Yo" <|end|> */
    expect_row(&ds, 0, ids, labels, NULL);
    qlt_dataset_free(&ds);
    free(path);
    free(tok);
    free(tcfg);
}

/* Gemma's template: <bos>, then <start_of_turn>ROLE\nCONTENT<end_of_turn>\n per message (the assistant's ROLE is
 * "model", CONTENT trimmed, a first system message opening the first user turn), loss on the model's content and
 * <end_of_turn>. The tokenizer is tok-qwen2style with Gemma's three tokens added (3003..3005); it also has
 * <|im_start|>, so auto takes gemma only from tokenizer_config.json's template. Ids from Hugging Face tokenizers
 * of the whole text; a role Gemma's template does not know is refused. */
Test(dataset, chat_gemma_trains_model_turns) {
    char *text, *tok = qlt_path_join(tmpdir, "tokenizer.json"), *tcfg = qlt_path_join(tmpdir, "tokenizer_config.json");
    cr_assert_eq(qlt_read_file(TOK, &text, NULL), 0);
    char *at = strstr(text, "\"content\": \"<|im_end|>\"");
    cr_assert(at);
    at = strstr(at, "}");
    *at = '\0';
    char *edited;
    cr_assert(asprintf(&edited, "%s}, {\"id\": 3003, \"content\": \"<bos>\", \"special\": true}, {\"id\": 3004, "
                                "\"content\": \"<start_of_turn>\", \"special\": true}, {\"id\": 3005, \"content\": "
                                "\"<end_of_turn>\", \"special\": true}%s", text, at + 1) > 0);
    test_write_text(tok, edited);
    free(edited);
    free(text);
    test_write_text(tcfg, "{\"chat_template\": \"{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + "
                          "message['role'] + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}\"}");
    char *path = write_file("a.jsonl", "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                                       " {\"role\": \"user\", \"content\": \"  Hi \\n\"}, {\"role\": \"assistant\", "
                                       "\"content\": \"Yo\"}]}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_CHAT, 23, 0);
    cfg.data.tokenizer = tok;
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    const int32_t ids[23] = {3003, 3004, 1769, 198, 33, 68, 307, 360, 68,  69, 383, 39,
                             72,   3005, 198,  3004, 1528, 198, 56, 78, 3005, 198, EOS};
    int32_t labels[23];
    for (int i = 0; i < 23; i++) labels[i] = X;
    for (int i = 18; i <= 20; i++) labels[i] = ids[i]; /* "Yo" <end_of_turn> */
    expect_row(&ds, 0, ids, labels, NULL);
    qlt_dataset_free(&ds);
    free(path);
    path = write_file("b.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"tool\", "
                                 "\"content\": \"Yo\"}]}\n");
    qlt_path_list files = {1, {path}};
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, NULL), -1);
    cr_assert(strstr(qlt_error(), "role 'tool'") && strstr(qlt_error(), "gemma"), "%s", qlt_error());
    free(path);
    free(tok);
    free(tcfg);
}

Test(dataset, tokens_format) {
    char *path = write_file("a.jsonl", "{\"input_ids\": [5, 6, 7]}\n{\"input_ids\": [1, 2, 3], \"labels\": [-100, -100, 3]}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TOKENS, 4, 0);
    cfg.data.tokenizer = (char *)"/nonexistent/tokenizer.json"; /* not needed */
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    expect_row(&ds, 0, (int32_t[]){5, 6, 7, 0}, (int32_t[]){X, 6, 7, X}, (int32_t[]){0, 0, 0, 3});
    expect_row(&ds, 1, (int32_t[]){1, 2, 3, 0}, (int32_t[]){X, X, 3, X}, (int32_t[]){0, 0, 0, 3});
    qlt_dataset_free(&ds);
    free(path);
}

static void expect_bad(qlt_data_format format, const char *content, const char *needle) {
    char *path = write_file("bad.jsonl", content);
    qlt_config cfg = make_cfg(format, 16, 1);
    qlt_path_list files = {1, {path}};
    qlt_dataset ds;
    qlt_error_clear();
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, NULL), -1, "should fail: %s", needle);
    char where[512];
    snprintf(where, sizeof where, "%s:2:", path);
    cr_assert(strstr(qlt_error(), where), "error \"%s\" should name %s", qlt_error(), where);
    cr_assert(strstr(qlt_error(), needle), "error \"%s\" should say \"%s\"", qlt_error(), needle);
    cr_assert_null(ds.input_ids);
    free(path);
}

Test(dataset, bad_lines_name_file_and_line) {
    expect_bad(QLT_DATA_FORMAT_TEXT, "{\"text\": \"Hi\"}\n{oops\n", "not valid JSON");
    expect_bad(QLT_DATA_FORMAT_TEXT, "{\"text\": \"Hi\"}\n{\"txt\": \"Hi\"}\n", "missing field \"text\"");
    expect_bad(QLT_DATA_FORMAT_TEXT, "{\"text\": \"Hi\"}\n{\"text\": 5}\n", "must be a string");
    expect_bad(QLT_DATA_FORMAT_TEXT, "{\"text\": \"Hi\"}\n\n", "empty line");
    expect_bad(QLT_DATA_FORMAT_TEXT, "{\"text\": \"Hi\"}\n[1]\n", "not a JSON object");
    /* two records run together: the second used to be dropped silently */
    expect_bad(QLT_DATA_FORMAT_TEXT, "{\"text\": \"Hi\"}\n{\"text\": \"a\"} {\"text\": \"b\"}\n", "text after the JSON object (near column 15)");
    expect_bad(QLT_DATA_FORMAT_TEXT, "{\"text\": \"Hi\"}\n{\"text\": \"a\"},\n", "text after the JSON object");
    expect_bad(QLT_DATA_FORMAT_COMPLETION, "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"a\"}\n", "\"completion\"");
    expect_bad(QLT_DATA_FORMAT_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n{\"messages\": [{\"role\": 1}]}\n",
               "messages[0]");
    expect_bad(QLT_DATA_FORMAT_TOKENS, "{\"input_ids\": [1]}\n{\"input_ids\": [1, \"x\"]}\n", "input_ids");
    expect_bad(QLT_DATA_FORMAT_TOKENS, "{\"input_ids\": [1]}\n{\"input_ids\": [1, 2], \"labels\": [1]}\n", "labels");
}

Test(dataset, skip_bad_counts) {
    char *path = write_file("a.jsonl", "{\"text\": \"Hi\"}\n{oops\n\n{\"text\": 5}\n{\"text\": \"Yo\"}\n{}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 16, 1);
    cfg.data.skip_bad = 1;
    qlt_dataset ds;
    build_ok(&ds, &cfg, path);
    cr_assert_eq(ds.n_skipped, 4);
    cr_assert_eq(ds.n_examples, 2);
    expect_row(&ds, 0, (int32_t[]){39, 72, EOS, 56, 78, EOS, EOS, EOS, EOS, EOS, EOS, EOS, EOS, EOS, EOS, EOS},
               (int32_t[]){X, 72, EOS, X, 78, EOS, X, X, X, X, X, X, X, X, X, X}, NULL);
    qlt_dataset_free(&ds);
    free(path);
}

static int same_rows(const qlt_dataset *a, const qlt_dataset *b) {
    size_t bytes = (size_t)a->n_rows * (size_t)a->seq_len * sizeof(int32_t);
    return a->n_rows == b->n_rows && a->seq_len == b->seq_len && memcmp(a->input_ids, b->input_ids, bytes) == 0 &&
           memcmp(a->labels, b->labels, bytes) == 0 && memcmp(a->seg_start, b->seg_start, bytes) == 0 &&
           a->n_tokens == b->n_tokens && a->n_label_tokens == b->n_label_tokens && a->n_examples == b->n_examples;
}

/* 600 varied lines (so several threads get work) */
static char *many_lines(void) {
    static const char *words[] = {"Hello", "world", "it's", "3.14", "日本語", "tabs\\t", "new\\nline", "CamelCase",
                                  "ok", "<|im_end|>", "émigré", "!!!"};
    size_t cap = 1 << 20, n = 0;
    char *s = malloc(cap);
    for (int i = 0; i < 600; i++) {
        n += (size_t)sprintf(s + n, "{\"text\": \"");
        for (int w = 0; w < 1 + (i * 7) % 23; w++) n += (size_t)sprintf(s + n, "%s%s", w ? " " : "", words[(i * 5 + w * 3) % 12]);
        n += (size_t)sprintf(s + n, "\"}\n");
    }
    return s;
}

Test(dataset, same_rows_for_any_thread_count) {
    char *content = many_lines();
    char *path = write_file("a.jsonl", content);
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 64, 1);
    qlt_dataset one, three;
    build_ok(&one, &cfg, path);
    cfg.data.threads = 3;
    build_ok(&three, &cfg, path);
    cr_assert(same_rows(&one, &three));
    cr_assert_eq(one.n_examples, 600);
    qlt_dataset_free(&one);
    qlt_dataset_free(&three);
    free(content);
    free(path);
}

Test(dataset, gzip_input_equals_plain) {
    char *content = many_lines();
    char *plain = write_file("a.jsonl", content);
    char gz_path[256];
    snprintf(gz_path, sizeof gz_path, "%s/a.jsonl.gz", tmpdir);
    gzFile gz = gzopen(gz_path, "wb");
    cr_assert_not_null(gz);
    gzwrite(gz, content, (unsigned)strlen(content));
    gzclose(gz);
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 64, 1);
    qlt_dataset a, b;
    build_ok(&a, &cfg, plain);
    build_ok(&b, &cfg, gz_path);
    cr_assert(same_rows(&a, &b));
    qlt_dataset_free(&a);
    qlt_dataset_free(&b);
    /* a truncated gzip file is an error naming the file, not a crash */
    FILE *f = fopen(gz_path, "r+b");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    cr_assert_eq(truncate(gz_path, size / 2), 0);
    qlt_path_list files = {1, {gz_path}};
    cr_assert_eq(qlt_dataset_build(&a, &cfg, &files, NULL, NULL), -1);
    cr_assert(strstr(qlt_error(), gz_path), "%s", qlt_error());
    free(content);
    free(plain);
}

Test(dataset, several_files_in_order) {
    char *a = write_file("a.jsonl", "{\"text\": \"Hi\"}\n");
    char *b = write_file("b.jsonl", "{\"text\": \"Yo\"}\n");
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 6, 1);
    qlt_path_list files = {2, {a, b}};
    qlt_dataset ds;
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, NULL), 0, "%s", qlt_error());
    expect_row(&ds, 0, (int32_t[]){39, 72, EOS, 56, 78, EOS}, (int32_t[]){X, 72, EOS, X, 78, EOS}, (int32_t[]){0, 0, 0, 3, 3, 3});
    qlt_dataset_free(&ds);
    free(a);
    free(b);
}

static ino_t cache_inode(const char *cache_dir, char *found, size_t cap) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s/dataset-*.bin", cache_dir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(fgets(found, (int)cap, p), "no cache file in %s", cache_dir);
    pclose(p);
    found[strcspn(found, "\n")] = '\0';
    struct stat st;
    cr_assert_eq(stat(found, &st), 0);
    return st.st_ino;
}

Test(dataset, cache_hit_miss_and_corruption) {
    char *content = many_lines();
    char *path = write_file("a.jsonl", content);
    char cache_dir[256], cache_file[512];
    snprintf(cache_dir, sizeof cache_dir, "%s/run/cache", tmpdir);
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 64, 1);
    cfg.data.cache = 1;
    qlt_path_list files = {1, {path}};
    qlt_dataset fresh, again;
    cr_assert_eq(qlt_dataset_build(&fresh, &cfg, &files, NULL, cache_dir), 0, "%s", qlt_error()); /* miss: written */
    ino_t first = cache_inode(cache_dir, cache_file, sizeof cache_file);
    cr_assert_eq(qlt_dataset_build(&again, &cfg, &files, NULL, cache_dir), 0, "%s", qlt_error()); /* hit */
    cr_assert_eq(cache_inode(cache_dir, cache_file, sizeof cache_file), first, "a hit must not rewrite the cache");
    cr_assert(same_rows(&fresh, &again));
    qlt_dataset_free(&again);
    /* corrupt one byte of the arrays: rebuilt (new file), same rows */
    FILE *f = fopen(cache_file, "r+b");
    fseek(f, -5, SEEK_END);
    int c = fgetc(f);
    fseek(f, -5, SEEK_END);
    fputc(c ^ 0x55, f);
    fclose(f);
    cr_assert_eq(qlt_dataset_build(&again, &cfg, &files, NULL, cache_dir), 0, "%s", qlt_error());
    cr_assert_neq(cache_inode(cache_dir, cache_file, sizeof cache_file), first, "a corrupt cache must be rebuilt");
    cr_assert(same_rows(&fresh, &again));
    qlt_dataset_free(&again);
    /* truncated cache file: rebuilt */
    cr_assert_eq(truncate(cache_file, 100), 0);
    cr_assert_eq(qlt_dataset_build(&again, &cfg, &files, NULL, cache_dir), 0, "%s", qlt_error());
    cr_assert(same_rows(&fresh, &again));
    qlt_dataset_free(&again);
    /* another seq_len is another key: a second file */
    cfg.data.seq_len = 32;
    cr_assert_eq(qlt_dataset_build(&again, &cfg, &files, NULL, cache_dir), 0, "%s", qlt_error());
    cr_assert_eq(again.seq_len, 32);
    qlt_dataset_free(&again);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test $(ls %s/dataset-*.bin | wc -l) -eq 2", cache_dir);
    cr_assert_eq(system(cmd), 0);
    qlt_dataset_free(&fresh);
    free(content);
    free(path);
}

/* tokenizer_config.json names the pad (and eos) id the rows hold: editing it must miss the cache, not reuse
 * rows padded with the old id. */
Test(dataset, cache_key_covers_tokenizer_config) {
    char *tok_path = qlt_path_join(tmpdir, "tokenizer.json"), *data;
    size_t len;
    cr_assert_eq(qlt_read_file(TOK, &data, &len), 0);
    test_write_bytes(tok_path, data, len);
    free(data);
    char *path = write_file("a.jsonl", "{\"text\": \"Hi\"}\n");
    char cache_dir[256];
    snprintf(cache_dir, sizeof cache_dir, "%s/run/cache", tmpdir);
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 8, 1);
    cfg.data.tokenizer = tok_path;
    cfg.data.cache = 1;
    qlt_path_list files = {1, {path}};
    qlt_dataset ds;
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, cache_dir), 0, "%s", qlt_error());
    cr_assert_eq(ds.pad_id, EOS);
    cr_assert_eq(ds.input_ids[7], EOS);
    qlt_dataset_free(&ds);
    char *tc = write_file("tokenizer_config.json", "{\"pad_token\": \"<|im_end|>\"}");
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, cache_dir), 0, "%s", qlt_error());
    cr_assert_eq(ds.pad_id, 3002, "pad id %d: the cache of the old tokenizer_config.json was reused", ds.pad_id);
    cr_assert_eq(ds.input_ids[7], 3002);
    qlt_dataset_free(&ds);
    free(tc);
    free(path);
    free(tok_path);
}

Test(dataset, eval_split_takes_the_last_rows) {
    char *content = many_lines();
    char *path = write_file("a.jsonl", content);
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 64, 1);
    qlt_dataset train, eval, whole;
    build_ok(&train, &cfg, path);
    build_ok(&whole, &cfg, path);
    cr_assert_eq(qlt_dataset_split(&train, &eval, 0.1f, 42), 0, "%s", qlt_error());
    cr_assert_eq(eval.n_rows, whole.n_rows / 10 > 0 ? whole.n_rows / 10 : 1);
    cr_assert_eq(train.n_rows + eval.n_rows, whole.n_rows);
    size_t row_bytes = (size_t)whole.seq_len * sizeof(int32_t);
    cr_assert(memcmp(eval.input_ids, whole.input_ids + train.n_rows * whole.seq_len, row_bytes * eval.n_rows) == 0);
    cr_assert_eq(train.n_tokens + eval.n_tokens, whole.n_tokens);
    cr_assert_eq(train.n_label_tokens + eval.n_label_tokens, whole.n_label_tokens);
    cr_assert_lt(eval.n_tokens, eval.n_rows * eval.seq_len); /* the last row is padded */
    qlt_dataset_free(&train);
    qlt_dataset_free(&eval);
    qlt_dataset_free(&whole);
    free(content);
    free(path);
}

Test(dataset, config_errors) {
    char *path = write_file("a.jsonl", "{\"text\": \"Hi\"}\n");
    qlt_path_list files = {1, {path}};
    qlt_dataset ds;
    qlt_config cfg = make_cfg(QLT_DATA_FORMAT_COUNT, 16, 1); /* not a format: a struct not filled by qlt_config_* */
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, NULL), -1);
    cr_assert(strstr(qlt_error(), "data.format"), "%s", qlt_error());
    cfg = make_cfg(QLT_DATA_FORMAT_TEXT, 16, 1);
    cfg.data.tokenizer = (char *)"";
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, QLT_TEST_DATA "/fixtures/tok-qwen2style", NULL), 0, "%s",
                 qlt_error()); /* found in model_dir */
    qlt_dataset_free(&ds);
    cfg.data.tokenizer = (char *)"/nonexistent/tokenizer.json";
    cr_assert_eq(qlt_dataset_build(&ds, &cfg, &files, NULL, NULL), -1);
    cr_assert(strstr(qlt_error(), "/nonexistent/tokenizer.json"), "%s", qlt_error());
    free(path);
}
