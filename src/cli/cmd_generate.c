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
#include "infer/generate.h"
#include "infer/kv_decoder.h"
#include "infer/sample.h"

typedef struct gen_args {
    const char *adapter, *prompt, *prompts, *system, *prompt_ids;
    int max_new_tokens;
    int chat; /* 1 --chat, 0 --raw, -1 auto */
    int seed_set;
    uint64_t seed;
    qlt_sample_opts sample;
} gen_args;

const qlt_cli_option qlt_generate_options[] = {
    QLT_CLI_OPT_CONFIG,
    QLT_CLI_OPT_SET,
    {"--adapter", "DIR", "lora.init_from", "the PEFT adapter to generate with (e.g. runs/demo/final)"},
    {"--prompt", "TEXT", NULL, "one prompt; the text is streamed to stdout as it is generated"},
    {"--prompts", "FILE.jsonl", NULL,
     "one prompt a line ({\"prompt\": \"...\"} or a JSON string); prints one JSON line per prompt: "
     "{\"prompt\", \"completion\", \"new_tokens\", \"stop\"}"},
    {"--prompt-ids", "IDS", NULL,
     "token ids (1,2,3) instead of text (no tokenizer needed); prints {\"ids\": [the new ids], \"stop\"}"},
    {"--max-new-tokens", "N", "256", "at most N new tokens"},
    {"--temperature", "T", "0 (greedy)", "> 0 samples"},
    {"--top-k", "K", "0 (all)", "keep the K most likely tokens"},
    {"--top-p", "P", "1 (all)", "keep the most likely tokens up to probability P"},
    {"--repetition-penalty", "R", "1 (off)", "penalize tokens already present"},
    {"--seed", "S", "train.seed", "the sampling seed"},
    {"--chat", NULL, "when the tokenizer has a chat template", "the prompt as a user turn of the chat template"},
    {"--raw", NULL, "when the tokenizer has no chat template", "the prompt as plain text"},
    {"--system", "TEXT", "none", "a system turn before the prompt (--chat)"},
    {NULL, NULL, NULL, NULL},
};

static void usage(void) {
    printf("usage: qlora-train generate --config FILE [--set section.key=value ...] [--adapter DIR]\n"
           "                            (--prompt TEXT | --prompts FILE.jsonl) [--max-new-tokens N]\n"
           "                            [--temperature T --top-k K --top-p P --repetition-penalty R --seed S]\n"
           "                            [--chat | --raw] [--system TEXT]\n"
           "       qlora-train generate --config FILE --prompt-ids 1,2,3 [--max-new-tokens N ...]\n\n"
           "Generates with model.path (+ the PEFT adapter of --adapter, else lora.init_from) on train.device.\n"
           "Tokens/s of the prompt and of the generation are printed to stderr.\n");
    qlt_cli_print_options(stdout, qlt_generate_options);
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
        else if (qlt_cli_option_find(qlt_generate_options, a) < 0 || !strcmp(a, "--config") || !strcmp(a, "--set")) {
            rest[(*n_rest)++] = argv[i]; /* --config / --set / --help / unknown: cli_config's */
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

static void report_speed(const qlt_generation *r) {
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

static int run_prompts_file(qlt_cli_model *cm, const gen_args *g, const qlt_generate_opts *go, qlt_rng *rng) {
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
        qlt_generation r;
        rc = qlt_generate(&cm->model, cm->has_lora ? &cm->lora : NULL, cm->tok, go, prompt, rng, NULL, &r);
        if (rc == 0) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "prompt", prompt);
            cJSON_AddStringToObject(o, "completion", r.text);
            cJSON_AddNumberToObject(o, "new_tokens", (double)r.new_tokens);
            cJSON_AddStringToObject(o, "stop", r.stop);
            char *text = cJSON_PrintUnformatted(o);
            printf("%s\n", text);
            fflush(stdout);
            free(text);
            cJSON_Delete(o);
            report_speed(&r);
        }
        qlt_generation_free(&r);
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
    qlt_kv_decoder d;
    int rc = qlt_kv_decoder_init(&d, &cm->model, cm->has_lora ? &cm->lora : NULL, prompt_len + g->max_new_tokens, 512);
    float *logits = qlt_xmalloc(sizeof(float) * (size_t)vocab);
    void *scratch = qlt_xmalloc(qlt_sample_scratch_bytes(vocab));
    if (rc == 0) rc = qlt_kv_decoder_step(&d, ids.data, prompt_len, logits, NULL);
    for (int step = 0; rc == 0 && step < g->max_new_tokens; step++) {
        int32_t next = qlt_sample_next(&g->sample, logits, vocab, ids.data, ids.len, rng, scratch);
        qlt_ids_push(&ids, next);
        if (step + 1 < g->max_new_tokens) rc = qlt_kv_decoder_step(&d, &next, 1, logits, NULL);
    }
    if (rc == 0) {
        printf("{\"ids\": [");
        for (int64_t i = prompt_len; i < ids.len; i++) printf("%s%d", i > prompt_len ? ", " : "", ids.data[i]);
        printf("], \"stop\": \"length\"}\n");
    }
    free(scratch);
    free(logits);
    if (d.be) qlt_kv_decoder_free(&d);
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
    rc = qlt_cli_load_config("generate", n_rest, rest, qlt_generate_options, &args, &cfg);
    if (rc == 0 && args.n_positional > 0)
        rc = qlt_fail("generate: unexpected argument '%s' (see `qlora-train generate --help`)", args.positional[0]);
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
    qlt_generate_opts go = {g.max_new_tokens, g.sample, 0, QLT_CHAT_TEMPLATE_CHATML, g.system};
    rc = 0;
    if (g.chat != 0) {
        rc = qlt_chat_template_resolve(cfg.data.chat_template, cm.tok, &go.tmpl);
        if (rc != 0 && g.chat == -1) {
            rc = 0; /* no template in the tokenizer: the prompt goes in as it is */
            fprintf(stderr, "qlora-train: the tokenizer has no chat template: the prompt is used as raw text\n");
        } else if (rc == 0) {
            go.chat = 1;
        }
    }
    qlt_rng rng;
    qlt_rng_seed(&rng, g.seed_set ? g.seed : cfg.train.seed);
    if (rc == 0 && g.prompt) {
        qlt_generation r;
        rc = qlt_generate(&cm.model, cm.has_lora ? &cm.lora : NULL, cm.tok, &go, g.prompt, &rng, stdout, &r);
        if (rc == 0) {
            printf("\n");
            fflush(stdout);
            report_speed(&r);
        }
        qlt_generation_free(&r);
    } else if (rc == 0) {
        rc = run_prompts_file(&cm, &g, &go, &rng);
    }
    if (rc != 0) qlt_cli_report_error();
    qlt_cli_model_close(&cm);
    qlt_config_free(&cfg);
    return rc == 0 ? 0 : 1;
}
