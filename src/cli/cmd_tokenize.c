/* cmd_tokenize.c: `qlora-train tokenize`: text -> ids (or ids -> text with --decode), one JSON value a
 * line on stdin/stdout, for checking the tokenizer against Hugging Face's; `--bench FILE.jsonl` times
 * encoding only (texts in memory first, no I/O in the timed part) and prints MB/s and tokens/s. */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_config.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "common/error.h"
#include "data/jsonl.h"
#include "formats/gguf.h"
#include "formats/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

const qlt_cli_option qlt_tokenize_options[] = {
    {"--tokenizer", "PATH", NULL, "a tokenizer.json or a .gguf model (required)"},
    {"--decode", NULL, "off: encode", "ids to text: a JSON array of ids a line in, a JSON string out"},
    {"--bench", "FILE.jsonl", NULL, "time encoding the \"text\" field of every line of FILE.jsonl (.jsonl.gz too)"},
    {"--threads", "N", "1", "--bench: threads (0 = all cores)"},
    {"--repeat", "R", "3", "--bench: passes over the file (the best is printed)"},
    {NULL, NULL, NULL, NULL},
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: qlora-train tokenize --tokenizer PATH [--decode]      (PATH: a tokenizer.json or a .gguf model)\n"
            "       qlora-train tokenize --tokenizer PATH --bench FILE.jsonl [--threads N] [--repeat R]\n\n"
            "Reads one JSON string a line on stdin and writes its token ids as one JSON array a line\n"
            "(Hugging Face encode(text, add_special_tokens=False); added/special tokens in the text are\n"
            "recognized). --decode does the reverse: a JSON array of ids a line in, a JSON string out.\n"
            "--bench encodes the \"text\" field of every line of FILE.jsonl (.jsonl.gz too) R times (default 3)\n"
            "with N threads (default 1; 0 = all cores) and prints the best MB/s and tokens/s (tokenizing only,\n"
            "no I/O).\n");
    qlt_cli_print_options(out, qlt_tokenize_options);
}

static int encode_lines(const qlt_tokenizer *tok) {
    qlt_encoder *enc = qlt_encoder_new(tok);
    qlt_ids ids = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long long lineno = 0;
    int status = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        cJSON *v = cJSON_ParseWithLength(line, (size_t)n);
        if (!cJSON_IsString(v)) {
            cJSON_Delete(v);
            qlt_fail("stdin line %lld: expected a JSON string (e.g. \"Hello\")", lineno);
            status = qlt_cli_report_error();
            break;
        }
        ids.len = 0;
        if (qlt_encoder_encode(enc, v->valuestring, strlen(v->valuestring), &ids) != 0) {
            cJSON_Delete(v);
            qlt_fail_context("stdin line %lld", lineno);
            status = qlt_cli_report_error();
            break;
        }
        cJSON_Delete(v);
        putchar('[');
        for (int64_t i = 0; i < ids.len; i++) printf(i ? ",%d" : "%d", ids.data[i]);
        fputs("]\n", stdout);
    }
    free(line);
    qlt_ids_free(&ids);
    qlt_encoder_free(enc);
    return status;
}

static int decode_lines(const qlt_tokenizer *tok) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long long lineno = 0;
    qlt_ids ids = {0};
    int status = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        cJSON *v = cJSON_ParseWithLength(line, (size_t)n);
        int ok = cJSON_IsArray(v);
        ids.len = 0;
        for (cJSON *e = ok ? v->child : NULL; e; e = e->next) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble)) ok = 0; /* 1.5 is no id */
            else qlt_ids_push(&ids, e->valueint);
        }
        cJSON_Delete(v);
        char *text;
        size_t len;
        if (!ok) {
            qlt_fail("stdin line %lld: expected a JSON array of token ids (e.g. [9707, 1879])", lineno);
            status = qlt_cli_report_error();
            break;
        }
        if (qlt_tokenizer_decode(tok, ids.data, ids.len, &text, &len) != 0) {
            qlt_fail_context("stdin line %lld", lineno);
            status = qlt_cli_report_error();
            break;
        }
        cJSON *s = cJSON_CreateString(text);
        char *json = cJSON_PrintUnformatted(s);
        puts(json);
        cJSON_free(json);
        cJSON_Delete(s);
        free(text);
    }
    free(line);
    qlt_ids_free(&ids);
    return status;
}

typedef struct bench_job {
    const qlt_tokenizer *tok;
    char **texts;
    int64_t begin, end, n_tokens;
    int failed;
} bench_job;

static void *bench_worker(void *arg) {
    bench_job *job = arg;
    qlt_encoder *enc = qlt_encoder_new(job->tok);
    qlt_ids ids = {0};
    job->n_tokens = 0;
    for (int64_t i = job->begin; i < job->end; i++) {
        ids.len = 0;
        if (qlt_encoder_encode(enc, job->texts[i], strlen(job->texts[i]), &ids) != 0) job->failed = 1;
        job->n_tokens += ids.len;
    }
    qlt_ids_free(&ids);
    qlt_encoder_free(enc);
    return NULL;
}

static int bench(const qlt_tokenizer *tok, const char *file, int threads, int repeat) {
    qlt_jsonl *in;
    if (qlt_jsonl_open(&in, file) != 0) return qlt_cli_report_error();
    char **texts = NULL;
    int64_t n = 0, cap = 0, bytes = 0;
    const char *line;
    size_t len;
    int r;
    while ((r = qlt_jsonl_next(in, &line, &len)) > 0) {
        cJSON *v = cJSON_ParseWithLength(line, len);
        const cJSON *t = cJSON_IsString(v) ? v : cJSON_GetObjectItemCaseSensitive(v, "text");
        if (cJSON_IsString(t)) {
            if (n == cap) texts = qlt_xrealloc(texts, (size_t)(cap = cap ? cap * 2 : 256) * sizeof *texts);
            texts[n++] = qlt_xstrdup(t->valuestring);
            bytes += (int64_t)strlen(t->valuestring);
        }
        cJSON_Delete(v);
    }
    qlt_jsonl_close(in);
    if (r < 0) return qlt_cli_report_error();
    if (threads < 1) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    bench_job *jobs = qlt_xcalloc((size_t)threads, sizeof *jobs);
    pthread_t *tid = qlt_xcalloc((size_t)threads, sizeof *tid);
    double best = 1e30;
    int64_t tokens = 0;
    for (int rep = 0; rep < repeat; rep++) {
        double t0 = qlt_now_seconds();
        for (int t = 0; t < threads; t++) {
            jobs[t] = (bench_job){tok, texts, n * t / threads, n * (t + 1) / threads, 0, 0};
            pthread_create(&tid[t], NULL, bench_worker, &jobs[t]);
        }
        tokens = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            tokens += jobs[t].n_tokens;
        }
        double dt = qlt_now_seconds() - t0;
        if (dt < best) best = dt;
    }
    printf("{\"impl\": \"qlora-train\", \"texts\": %lld, \"bytes\": %lld, \"tokens\": %lld, \"threads\": %d, "
           "\"seconds\": %.4f, \"MB_per_s\": %.2f, \"tokens_per_s\": %.0f}\n",
           (long long)n, (long long)bytes, (long long)tokens, threads, best, bytes / best / 1e6, tokens / best);
    for (int64_t i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(jobs);
    free(tid);
    return 0;
}

int qlt_cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *bench_file = NULL;
    int decode = 0, threads = 1, repeat = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--decode") == 0) {
            decode = 1;
        } else if (i + 1 < argc && strcmp(a, "--tokenizer") == 0) {
            path = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--bench") == 0) {
            bench_file = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--threads") == 0) {
            if (qlt_cli_parse_int(a, argv[++i], 0, 4096, &threads) != 0) return qlt_cli_report_error();
        } else if (i + 1 < argc && strcmp(a, "--repeat") == 0) {
            if (qlt_cli_parse_int(a, argv[++i], 1, 1000, &repeat) != 0) return qlt_cli_report_error();
        } else {
            fprintf(stderr, "qlora-train: error: tokenize: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "qlora-train: error: tokenize needs --tokenizer PATH (a tokenizer.json or a .gguf model)\n");
        return 2;
    }
    qlt_tokenizer *tok;
    int loaded = qlt_gguf_is_gguf(path) ? qlt_gguf_tokenizer_load_file(&tok, path) : qlt_tokenizer_load(&tok, path);
    if (loaded != 0) return qlt_cli_report_error();
    int status = bench_file ? bench(tok, bench_file, threads, repeat) : decode ? decode_lines(tok) : encode_lines(tok);
    qlt_tokenizer_free(tok);
    return status;
}
