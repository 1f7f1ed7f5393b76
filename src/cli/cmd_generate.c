/* cmd_generate.c: `qlora-train generate`: text from the model (+ a PEFT adapter) for one prompt, streamed to
 * stdout as it comes, or for every prompt of a .jsonl file, one JSON line each. The prompt is a user turn of
 * the model's chat template (--chat, the default when the tokenizer has one) or the raw text (--raw).
 * Generation stops at the end-of-turn or end-of-text token, or after --max-new-tokens; the speed goes to
 * stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli_config.h"
#include "cli/cli_model.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "data/chat_template.h"
#include "data/jsonl.h"
#include "infer/decoder.h"
#include "infer/sample.h"

typedef struct gen_args {
    const char *adapter, *prompt, *prompts, *system, *prompt_ids;
    int max_new_tokens;
    int chat; /* 1 --chat, 0 --raw, -1 auto */
    int seed_set;
    uint64_t seed;
    qlt_sample_opts sample;
} gen_args;

static void usage(void) {
    printf("usage: qlora-train generate --config FILE [--set section.key=value ...] [--adapter DIR]\n"
           "                            (--prompt TEXT | --prompts FILE.jsonl) [--max-new-tokens N]\n"
           "                            [--temperature T --top-k K --top-p P --repetition-penalty R --seed S]\n"
           "                            [--chat | --raw] [--system TEXT]\n"
           "       qlora-train generate --config FILE --prompt-ids 1,2,3 [--max-new-tokens N ...]\n\n"
           "Generates with model.path (+ the PEFT adapter of --adapter, else lora.init_from) on train.device.\n"
           "  --prompt TEXT          one prompt; the text is streamed to stdout as it is generated\n"
           "  --prompts FILE.jsonl   one prompt a line ({\"prompt\": \"...\"} or a JSON string); prints one JSON\n"
           "                         line per prompt: {\"prompt\", \"completion\", \"new_tokens\", \"stop\"}\n"
           "  --max-new-tokens N     at most N new tokens (default 256)\n"
           "  --temperature T        0 = greedy (default); > 0 samples\n"
           "  --top-k K              keep the K most likely tokens (default 0 = all)\n"
           "  --top-p P              keep the most likely tokens up to probability P (default 1 = all)\n"
           "  --repetition-penalty R penalize tokens already present (default 1 = off)\n"
           "  --seed S               the sampling seed (default train.seed)\n"
           "  --chat / --raw         the prompt as a user turn of the chat template (default when the tokenizer\n"
           "                         has one) / as plain text\n"
           "  --system TEXT          a system turn before the prompt (--chat)\n"
           "  --prompt-ids IDS       token ids instead of text (no tokenizer needed); prints one JSON line\n"
           "                         {\"ids\": [the new ids], \"stop\"}; stops at --max-new-tokens\n"
           "Tokens/s of the prompt and of the generation are printed to stderr.\n");
}

static int parse_float(const char *flag, const char *v, float *out) {
    char *end;
    double x = strtod(v, &end);
    if (!v[0] || *end) return qlt_fail("%s: expected a number, got '%s'", flag, v);
    *out = (float)x;
    return 0;
}

/* Takes generate's own options out of argv into *g; the rest (--config, --set, --help) stays in rest/n_rest. */
static int parse_args(int argc, char **argv, gen_args *g, char **rest, int *n_rest) {
    memset(g, 0, sizeof *g);
    g->max_new_tokens = 256;
    g->chat = -1;
    g->sample = (qlt_sample_opts){0.0f, 0, 1.0f, 1.0f};
    *n_rest = 0;
    rest[(*n_rest)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes_value = 1;
        if (strcmp(a, "--chat") == 0) g->chat = 1, takes_value = 0;
        else if (strcmp(a, "--raw") == 0) g->chat = 0, takes_value = 0;
        else if (strcmp(a, "--adapter") && strcmp(a, "--prompt") && strcmp(a, "--prompts") && strcmp(a, "--system") &&
                 strcmp(a, "--prompt-ids") &&
                 strcmp(a, "--max-new-tokens") && strcmp(a, "--temperature") && strcmp(a, "--top-k") &&
                 strcmp(a, "--top-p") && strcmp(a, "--repetition-penalty") && strcmp(a, "--seed")) {
            rest[(*n_rest)++] = argv[i]; /* --config / --set / --help: cli_config's */
            continue;
        }
        if (!takes_value) continue;
        if (!v) return qlt_fail("%s needs a value", a);
        i++;
        if (strcmp(a, "--adapter") == 0) g->adapter = v;
        else if (strcmp(a, "--prompt") == 0) g->prompt = v;
        else if (strcmp(a, "--prompts") == 0) g->prompts = v;
        else if (strcmp(a, "--system") == 0) g->system = v;
        else if (strcmp(a, "--prompt-ids") == 0) g->prompt_ids = v;
        else if (strcmp(a, "--max-new-tokens") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 1, 1 << 24, &g->max_new_tokens));
        else if (strcmp(a, "--temperature") == 0) QLT_TRY(parse_float(a, v, &g->sample.temperature));
        else if (strcmp(a, "--top-k") == 0) QLT_TRY(qlt_cli_parse_int(a, v, 0, 1 << 30, &g->sample.top_k));
        else if (strcmp(a, "--top-p") == 0) QLT_TRY(parse_float(a, v, &g->sample.top_p));
        else if (strcmp(a, "--repetition-penalty") == 0) QLT_TRY(parse_float(a, v, &g->sample.repetition_penalty));
        else {
            char *end;
            g->seed = strtoull(v, &end, 10);
            if (!v[0] || *end) return qlt_fail("--seed: expected a non-negative integer, got '%s'", v);
            g->seed_set = 1;
        }
    }
    return 0;
}

/* The ids that end a generation: end of text, the template's end of turn, and the usual names of both. */
typedef struct stop_ids {
    int32_t id[8];
    int n;
} stop_ids;

static void stop_add(stop_ids *s, int32_t id) {
    if (id < 0 || s->n == 8) return;
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == id) return;
    s->id[s->n++] = id;
}

static int is_stop(const stop_ids *s, int32_t id) {
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == id) return 1;
    return 0;
}

/* Streams the decoded text of ids[0..n) beyond the *printed bytes already written; a trailing replacement
 * character (an incomplete UTF-8 sequence) waits for the next token unless final. */
static int stream_text(const qlt_tokenizer *tok, const int32_t *ids, int64_t n, size_t *printed, int final,
                       FILE *out) {
    char *text;
    size_t len;
    QLT_TRY(qlt_tokenizer_decode(tok, ids, n, &text, &len));
    size_t upto = len;
    if (!final && len >= 3 && memcmp(text + len - 3, "\xef\xbf\xbd", 3) == 0) upto = len - 3;
    if (upto > *printed) {
        if (out) {
            fwrite(text + *printed, 1, upto - *printed, out);
            fflush(out);
        }
        *printed = upto;
    }
    free(text);
    return 0;
}

typedef struct gen_result {
    int64_t prompt_tokens, new_tokens;
    double prefill_s, decode_s;
    const char *stop; /* "eos" | "length" */
    char *completion; /* heap */
} gen_result;

/* Generates for one prompt; streams to `stream` when not NULL. */
static int generate_one(qlt_cli_model *cm, const gen_args *g, qlt_chat_template tmpl, const char *prompt,
                        qlt_rng *rng, const stop_ids *stops, FILE *stream, gen_result *res) {
    memset(res, 0, sizeof *res);
    qlt_ids ids = {0};
    qlt_encoder *enc = qlt_encoder_new(cm->tok);
    int rc;
    if (g->chat) {
        qlt_chat_message msgs[2];
        int n = 0;
        if (g->system) msgs[n++] = (qlt_chat_message){"system", g->system};
        msgs[n++] = (qlt_chat_message){"user", prompt};
        rc = qlt_chat_encode_prompt(tmpl, cm->tok, enc, msgs, n, &ids);
    } else {
        rc = qlt_encoder_encode(enc, prompt, strlen(prompt), &ids);
    }
    qlt_encoder_free(enc);
    if (rc != 0 || ids.len == 0) {
        qlt_ids_free(&ids);
        return rc != 0 ? rc : qlt_fail("generate: the prompt encodes to no tokens");
    }
    const int32_t vocab = cm->model.cfg.vocab;
    const int64_t prompt_len = ids.len, max_len = prompt_len + g->max_new_tokens;
    qlt_decoder d;
    if (qlt_decoder_init(&d, &cm->model, cm->has_lora ? &cm->lora : NULL, max_len, 512) != 0) {
        qlt_ids_free(&ids);
        return -1;
    }
    float *logits = qlt_xmalloc(sizeof(float) * (size_t)vocab);
    void *scratch = qlt_xmalloc(qlt_sample_scratch_bytes(vocab));
    double t0 = qlt_now_seconds();
    rc = qlt_decoder_step(&d, ids.data, prompt_len, logits, NULL);
    double t1 = qlt_now_seconds();
    res->prompt_tokens = prompt_len;
    res->prefill_s = t1 - t0;
    res->stop = "length";
    size_t printed = 0;
    for (int step = 0; rc == 0 && step < g->max_new_tokens; step++) {
        int32_t next = qlt_sample_next(&g->sample, logits, vocab, ids.data, ids.len, rng, scratch);
        if (is_stop(stops, next)) {
            res->stop = "eos";
            break;
        }
        qlt_ids_push(&ids, next);
        res->new_tokens++;
        rc = stream_text(cm->tok, ids.data + prompt_len, res->new_tokens, &printed, 0, stream);
        if (rc == 0 && step + 1 < g->max_new_tokens) rc = qlt_decoder_step(&d, &next, 1, logits, NULL);
    }
    res->decode_s = qlt_now_seconds() - t1;
    if (rc == 0) rc = stream_text(cm->tok, ids.data + prompt_len, res->new_tokens, &printed, 1, stream);
    if (rc == 0) {
        size_t len;
        rc = qlt_tokenizer_decode(cm->tok, ids.data + prompt_len, res->new_tokens, &res->completion, &len);
    }
    free(scratch);
    free(logits);
    qlt_decoder_free(&d);
    qlt_ids_free(&ids);
    return rc;
}

static void report_speed(const gen_result *r) {
    fprintf(stderr, "qlora-train: prompt %lld tokens in %.2f s (%.1f tokens/s), generated %lld tokens in %.2f s "
                    "(%.1f tokens/s), stop: %s\n",
            (long long)r->prompt_tokens, r->prefill_s, r->prefill_s > 0 ? r->prompt_tokens / r->prefill_s : 0.0,
            (long long)r->new_tokens, r->decode_s, r->decode_s > 0 ? r->new_tokens / r->decode_s : 0.0, r->stop);
}

/* The prompt of one .jsonl line: a JSON string, or an object with "prompt". Heap, or NULL with qlt_fail. */
static char *line_prompt(const char *line, const char *path, int64_t lineno) {
    cJSON *j = cJSON_Parse(line);
    const cJSON *p = cJSON_IsString(j) ? j : cJSON_GetObjectItemCaseSensitive(j, "prompt");
    char *out = cJSON_IsString(p) ? qlt_xstrdup(p->valuestring) : NULL;
    if (!out)
        qlt_fail("%s:%lld: expected a JSON string or an object with a \"prompt\" string", path, (long long)lineno);
    cJSON_Delete(j);
    return out;
}

static int run_prompts_file(qlt_cli_model *cm, const gen_args *g, qlt_chat_template tmpl, qlt_rng *rng,
                            const stop_ids *stops) {
    qlt_jsonl *in;
    QLT_TRY(qlt_jsonl_open(&in, g->prompts));
    const char *line;
    size_t len;
    int rc = 0, got;
    while (rc == 0 && (got = qlt_jsonl_next(in, &line, &len)) == 1) {
        if (len == 0) continue;
        char *prompt = line_prompt(line, g->prompts, qlt_jsonl_lineno(in));
        if (!prompt) {
            rc = -1;
            break;
        }
        gen_result r;
        rc = generate_one(cm, g, tmpl, prompt, rng, stops, NULL, &r);
        if (rc == 0) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "prompt", prompt);
            cJSON_AddStringToObject(o, "completion", r.completion);
            cJSON_AddNumberToObject(o, "new_tokens", (double)r.new_tokens);
            cJSON_AddStringToObject(o, "stop", r.stop);
            char *text = cJSON_PrintUnformatted(o);
            printf("%s\n", text);
            fflush(stdout);
            free(text);
            cJSON_Delete(o);
            report_speed(&r);
        }
        free(r.completion);
        free(prompt);
    }
    if (rc == 0 && got < 0) rc = -1;
    qlt_jsonl_close(in);
    return rc;
}

/* --prompt-ids: "1,2,3" -> ids (no tokenizer); the new ids printed as one JSON line. */
static int run_prompt_ids(qlt_cli_model *cm, const gen_args *g, qlt_rng *rng) {
    qlt_ids ids = {0};
    const char *p = g->prompt_ids;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= cm->model.cfg.vocab) {
            qlt_ids_free(&ids);
            return qlt_fail("--prompt-ids: expected comma-separated token ids below the vocabulary size %d, at '%s'",
                            cm->model.cfg.vocab, p);
        }
        qlt_ids_push(&ids, (int32_t)v);
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            qlt_ids_free(&ids);
            return qlt_fail("--prompt-ids: unexpected '%c' (use 1,2,3)", *end);
        }
    }
    if (ids.len == 0) return qlt_fail("--prompt-ids: no ids");
    const int32_t vocab = cm->model.cfg.vocab;
    const int64_t prompt_len = ids.len;
    qlt_decoder d;
    int rc = qlt_decoder_init(&d, &cm->model, cm->has_lora ? &cm->lora : NULL, prompt_len + g->max_new_tokens, 512);
    float *logits = qlt_xmalloc(sizeof(float) * (size_t)vocab);
    void *scratch = qlt_xmalloc(qlt_sample_scratch_bytes(vocab));
    if (rc == 0) rc = qlt_decoder_step(&d, ids.data, prompt_len, logits, NULL);
    for (int step = 0; rc == 0 && step < g->max_new_tokens; step++) {
        int32_t next = qlt_sample_next(&g->sample, logits, vocab, ids.data, ids.len, rng, scratch);
        qlt_ids_push(&ids, next);
        if (step + 1 < g->max_new_tokens) rc = qlt_decoder_step(&d, &next, 1, logits, NULL);
    }
    if (rc == 0) {
        printf("{\"ids\": [");
        for (int64_t i = prompt_len; i < ids.len; i++) printf("%s%d", i > prompt_len ? ", " : "", ids.data[i]);
        printf("], \"stop\": \"length\"}\n");
    }
    free(scratch);
    free(logits);
    if (d.be) qlt_decoder_free(&d);
    qlt_ids_free(&ids);
    return rc;
}

int qlt_cmd_generate(int argc, char **argv) {
    gen_args g;
    char **rest = qlt_xmalloc(sizeof(char *) * (size_t)(argc + 1));
    int n_rest = 0, rc;
    qlt_cli_args args;
    qlt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (parse_args(argc, argv, &g, rest, &n_rest) != 0) {
        free(rest);
        return qlt_cli_report_error();
    }
    rc = qlt_cli_load_config(n_rest, rest, 0, &args, &cfg);
    free(rest);
    if (rc != 0) {
        qlt_config_free(&cfg);
        return qlt_cli_report_error();
    }
    if (args.help) {
        usage();
        qlt_config_free(&cfg);
        return 0;
    }
    if ((g.prompt != NULL) + (g.prompts != NULL) + (g.prompt_ids != NULL) != 1) {
        qlt_fail("generate needs one of --prompt TEXT, --prompts FILE.jsonl or --prompt-ids IDS");
        qlt_config_free(&cfg);
        return qlt_cli_report_error();
    }
    if (qlt_sample_check(&g.sample) != 0) {
        qlt_config_free(&cfg);
        return qlt_cli_report_error();
    }
    qlt_cli_model cm;
    if (qlt_cli_model_open(&cm, &cfg, g.adapter, g.prompt_ids == NULL) != 0) {
        qlt_config_free(&cfg);
        return qlt_cli_report_error();
    }
    if (g.prompt_ids) {
        qlt_rng rng;
        qlt_rng_seed(&rng, g.seed_set ? g.seed : cfg.train.seed);
        rc = run_prompt_ids(&cm, &g, &rng);
        if (rc != 0) qlt_cli_report_error();
        qlt_cli_model_close(&cm);
        qlt_config_free(&cfg);
        return rc == 0 ? 0 : 1;
    }
    qlt_chat_template tmpl = QLT_CHAT_TEMPLATE_CHATML;
    stop_ids stops = {{0}, 0};
    stop_add(&stops, qlt_tokenizer_eos_id(cm.tok));
    static const char *const end_names[] = {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>"};
    for (size_t i = 0; i < sizeof end_names / sizeof end_names[0]; i++)
        stop_add(&stops, qlt_tokenizer_token_id(cm.tok, end_names[i]));
    rc = 0;
    if (g.chat != 0) {
        rc = qlt_chat_template_resolve(cfg.data.chat_template, cm.tok, &tmpl);
        if (rc != 0 && g.chat == -1) {
            rc = 0; /* no template in the tokenizer: the prompt goes in as it is */
            g.chat = 0;
            fprintf(stderr, "qlora-train: the tokenizer has no chat template: the prompt is used as raw text\n");
        } else if (rc == 0) {
            g.chat = 1;
            stop_add(&stops, qlt_chat_end_of_turn(tmpl, cm.tok));
        }
    }
    qlt_rng rng;
    qlt_rng_seed(&rng, g.seed_set ? g.seed : cfg.train.seed);
    if (rc == 0 && g.prompt) {
        gen_result r;
        rc = generate_one(&cm, &g, tmpl, g.prompt, &rng, &stops, stdout, &r);
        if (rc == 0) {
            printf("\n");
            fflush(stdout);
            report_speed(&r);
        }
        free(r.completion);
    } else if (rc == 0) {
        rc = run_prompts_file(&cm, &g, tmpl, &rng, &stops);
    }
    if (rc != 0) qlt_cli_report_error();
    qlt_cli_model_close(&cm);
    qlt_config_free(&cfg);
    return rc == 0 ? 0 : 1;
}
