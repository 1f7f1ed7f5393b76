/* dataset.c: qlt_dataset_build / split / free (see dataset.h). Lines are read in batches (bounded
 * memory); each batch is cut into contiguous chunks, one per thread, each thread turning its lines into
 * examples with its own encoder; the examples then go to the packer in file order, so the rows are the
 * same for any thread count. Bad lines fail the build naming file:line, or with data.skip_bad are
 * counted in n_skipped. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "data/dataset_internal.h"
#include "data/jsonl.h"
#include "data/labeled.h"

enum { BATCH_LINES = 16384, BATCH_BYTES = 64 << 20, SKIPS_SHOWN = 5 /* data.skip_bad: lines named one by one */ };

typedef struct line_batch {
    char *arena;
    int64_t arena_len, arena_cap;
    int64_t *off, *lineno;
    size_t *len;
    int64_t n;
} line_batch;

typedef struct worker {
    qlt_example_ctx ctx;
    const line_batch *batch;
    int64_t begin, end;       /* lines of the batch */
    qlt_ids ids, labels;      /* examples back to back */
    int64_t *ex_end;          /* [end - begin] ids->len after each line (a bad line adds nothing) */
    char **ex_err;            /* [end - begin] NULL or the line's error */
} worker;

static void *worker_run(void *arg) {
    worker *w = arg;
    w->ids.len = w->labels.len = 0;
    for (int64_t i = w->begin; i < w->end; i++) {
        const line_batch *b = w->batch;
        w->ex_err[i - w->begin] = NULL;
        if (qlt_example_parse(&w->ctx, b->arena + b->off[i], b->len[i], &w->ids, &w->labels) != 0)
            w->ex_err[i - w->begin] = qlt_xstrdup(qlt_error());
        w->ex_end[i - w->begin] = w->ids.len;
    }
    return NULL;
}

/* Reads up to BATCH_LINES lines; returns 1 when it read any, 0 at the end, -1 on error. */
static int read_batch(qlt_jsonl *in, line_batch *b) {
    b->n = 0;
    b->arena_len = 0;
    const char *line;
    size_t len;
    while (b->n < BATCH_LINES && b->arena_len < BATCH_BYTES) {
        int r = qlt_jsonl_next(in, &line, &len);
        if (r < 0) return -1;
        if (r == 0) break;
        if (b->arena_len + (int64_t)len + 1 > b->arena_cap) {
            while (b->arena_len + (int64_t)len + 1 > b->arena_cap) b->arena_cap = b->arena_cap ? b->arena_cap * 2 : 1 << 20;
            b->arena = qlt_xrealloc(b->arena, (size_t)b->arena_cap);
        }
        memcpy(b->arena + b->arena_len, line, len);
        b->arena[b->arena_len + (int64_t)len] = '\0';
        b->off[b->n] = b->arena_len;
        b->len[b->n] = len;
        b->lineno[b->n] = qlt_jsonl_lineno(in);
        b->arena_len += (int64_t)len + 1;
        b->n++;
    }
    return b->n > 0;
}

typedef struct build_state {
    const qlt_config *cfg;
    qlt_packer packer;
    worker *workers;
    int n_threads;
    line_batch batch;
} build_state;

/* Runs one batch through the workers and hands the examples to the packer in order. */
static int process_batch(build_state *st, const char *path) {
    line_batch *b = &st->batch;
    int n = st->n_threads;
    if (b->n < 64) n = 1;
    pthread_t tid[256];
    for (int t = 0; t < n; t++) {
        worker *w = &st->workers[t];
        w->batch = b;
        w->begin = b->n * t / n;
        w->end = b->n * (t + 1) / n;
        if (n > 1) pthread_create(&tid[t], NULL, worker_run, w);
        else worker_run(w);
    }
    if (n > 1)
        for (int t = 0; t < n; t++) pthread_join(tid[t], NULL);
    int failed = 0;
    for (int t = 0; t < n; t++) {
        worker *w = &st->workers[t];
        int64_t prev = 0;
        for (int64_t i = w->begin; i < w->end; i++) {
            int64_t k = i - w->begin, end = w->ex_end[k];
            char *err = w->ex_err[k];
            if (err) {
                if (!failed && !st->cfg->data.skip_bad) {
                    if (strstr(err, "use data.format:")) /* the whole file is likely of another format */
                        qlt_fail("%s:%lld: %s (data.format is %s)", path, (long long)b->lineno[i], err,
                                 qlt_config_enum_text("data.format", st->cfg->data.format));
                    else
                        qlt_fail("%s:%lld: %s (data.format: %s); fix the line or set data.skip_bad: true to skip bad "
                                 "lines", path, (long long)b->lineno[i], err,
                                 qlt_config_enum_text("data.format", st->cfg->data.format));
                    failed = 1;
                } else if (!failed && st->packer.ds->n_skipped < SKIPS_SHOWN) {
                    fprintf(stderr, "qlora-train: data.skip_bad: skipped %s:%lld: %s\n", path, (long long)b->lineno[i],
                            err);
                }
                st->packer.ds->n_skipped++;
                free(err);
            } else if (!failed) {
                qlt_packer_add(&st->packer, w->ids.data + prev, w->labels.data + prev, end - prev);
            }
            prev = end;
        }
    }
    return failed ? -1 : 0;
}

static int mkdir_p(const char *dir) {
    char *p = qlt_xstrdup(dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        mkdir(p, 0777);
        *s = '/';
    }
    int r = mkdir(p, 0777);
    free(p);
    if (r != 0 && errno != EEXIST) return qlt_fail("%s: cannot create the dataset cache directory: %s", dir, strerror(errno));
    return 0;
}

static int build_rows(build_state *st, const qlt_path_list *files) {
    for (int f = 0; f < files->count; f++) {
        qlt_jsonl *in;
        QLT_TRY(qlt_jsonl_open(&in, files->items[f]));
        int r;
        while ((r = read_batch(in, &st->batch)) > 0)
            if (process_batch(st, files->items[f]) != 0) break;
        qlt_jsonl_close(in);
        if (r != 0) return -1;
    }
    return 0;
}

/* tok_path: the tokenizer.json to load, or NULL to use model_tok (the model's own, kept by the caller). */
static int build_uncached(qlt_dataset *ds, const qlt_config *cfg, const qlt_path_list *files,
                          qlt_data_format format, const char *tok_path, const qlt_tokenizer *model_tok) {
    qlt_tokenizer *tok = NULL; /* loaded here, freed here */
    qlt_example_ctx ctx = {format, NULL, NULL, 0, cfg->data.train_on_prompt, -1};
    int32_t pad = 0;
    if (format != QLT_DATA_FORMAT_TOKENS) {
        if (tok_path && qlt_tokenizer_load(&tok, tok_path) != 0) return qlt_fail_context("data.tokenizer");
        ctx.tok = tok ? tok : model_tok;
        ctx.eos = qlt_tokenizer_eos_id(ctx.tok);
        pad = qlt_tokenizer_pad_id(ctx.tok);
        if (format == QLT_DATA_FORMAT_CHAT && qlt_chat_template_resolve(cfg->data.chat_template, ctx.tok, &ctx.chat) != 0) {
            qlt_tokenizer_free(tok);
            return -1;
        }
        if (format != QLT_DATA_FORMAT_CHAT && ctx.eos < 0) {
            qlt_tokenizer_free(tok);
            return qlt_fail("%s: no end-of-text token (<|endoftext|>, <|end_of_text|>, </s>, or eos_token in "
                            "tokenizer_config.json), which data.format: %s appends to every example",
                            tok_path ? tok_path : "the model's tokenizer", qlt_config_enum_text("data.format", format));
        }
    }
    build_state st;
    memset(&st, 0, sizeof st);
    st.cfg = cfg;
    st.n_threads = cfg->data.threads > 0 ? cfg->data.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (st.n_threads < 1) st.n_threads = 1;
    if (st.n_threads > 256) st.n_threads = 256;
    st.workers = qlt_xcalloc((size_t)st.n_threads, sizeof *st.workers);
    for (int t = 0; t < st.n_threads; t++) {
        st.workers[t].ctx = ctx;
        if (ctx.tok) st.workers[t].ctx.enc = qlt_encoder_new(ctx.tok);
        st.workers[t].ex_end = qlt_xmalloc(BATCH_LINES * sizeof(int64_t));
        st.workers[t].ex_err = qlt_xmalloc(BATCH_LINES * sizeof(char *));
    }
    st.batch.off = qlt_xmalloc(BATCH_LINES * sizeof(int64_t));
    st.batch.lineno = qlt_xmalloc(BATCH_LINES * sizeof(int64_t));
    st.batch.len = qlt_xmalloc(BATCH_LINES * sizeof(size_t));
    qlt_packer_init(&st.packer, ds, cfg->data.seq_len, cfg->data.packing, pad);
    int r = build_rows(&st, files);
    qlt_packer_finish(&st.packer);
    for (int t = 0; t < st.n_threads; t++) {
        qlt_encoder_free(st.workers[t].ctx.enc);
        qlt_ids_free(&st.workers[t].ids);
        qlt_ids_free(&st.workers[t].labels);
        free(st.workers[t].ex_end);
        free(st.workers[t].ex_err);
    }
    free(st.workers);
    free(st.batch.arena);
    free(st.batch.off);
    free(st.batch.lineno);
    free(st.batch.len);
    qlt_tokenizer_free(tok);
    if (cfg->data.skip_bad && ds->n_skipped > 0)
        fprintf(stderr, "qlora-train: data.skip_bad: %lld bad line%s skipped in %s%s%s\n", (long long)ds->n_skipped,
                ds->n_skipped == 1 ? "" : "s", files->items[0], files->count > 1 ? " ..." : "",
                ds->n_skipped > SKIPS_SHOWN ? " (the first ones are named above)" : "");
    if (r == 0 && ds->n_rows == 0)
        r = qlt_fail("%s%s: no examples (%lld lines skipped as bad)", files->items[0], files->count > 1 ? " ..." : "",
                     (long long)ds->n_skipped);
    if (r != 0) qlt_dataset_free(ds);
    return r;
}

int qlt_dataset_build(qlt_dataset *ds, const qlt_config *cfg, const qlt_path_list *files, const char *model_dir,
                      const char *cache_dir) {
    return qlt_dataset_build_with(ds, cfg, files, model_dir, NULL, cache_dir);
}

int qlt_dataset_build_with(qlt_dataset *ds, const qlt_config *cfg, const qlt_path_list *files, const char *model_dir,
                           const qlt_tokenizer *model_tok, const char *cache_dir) {
    memset(ds, 0, sizeof *ds);
    qlt_data_format format = cfg->data.format;
    if ((unsigned)format >= QLT_DATA_FORMAT_COUNT)
        return qlt_fail("data.format = %d: not one of text, completion, alpaca, chat, tokens (e.g. --set "
                        "data.format=text)", (int)format);
    if (cfg->data.seq_len < 2) return qlt_fail("data.seq_len is %d: it must be at least 2", cfg->data.seq_len);
    if (!files || files->count == 0) return qlt_fail("data.train: no data files given (a list of .jsonl / .jsonl.gz)");
    char *tok_path = NULL;
    if (format != QLT_DATA_FORMAT_TOKENS) {
        if (cfg->data.tokenizer && cfg->data.tokenizer[0]) {
            tok_path = qlt_xstrdup(cfg->data.tokenizer);
        } else if (model_tok) {
            /* the model's own tokenizer (a GGUF file's): tok_path stays NULL */
        } else if (model_dir && model_dir[0]) {
            tok_path = qlt_xmalloc(strlen(model_dir) + 32);
            sprintf(tok_path, "%s/tokenizer.json", model_dir);
        } else {
            return qlt_fail("data.tokenizer is empty and there is no model.path to find tokenizer.json in: set "
                            "data.tokenizer to a tokenizer.json, or use data.format: tokens");
        }
    }
    char *cache_path = NULL;
    uint64_t key = 0;
    int r = 0;
    if (cache_dir && cache_dir[0] && cfg->data.cache) {
        if ((r = qlt_dataset_cache_key(cfg, files, tok_path, tok_path ? NULL : model_tok, &key)) == 0 &&
            (r = mkdir_p(cache_dir)) == 0) {
            cache_path = qlt_xmalloc(strlen(cache_dir) + 64);
            sprintf(cache_path, "%s/dataset-%016llx.bin", cache_dir, (unsigned long long)key);
            if (qlt_dataset_cache_load(ds, cache_path, key)) {
                free(cache_path);
                free(tok_path);
                return 0;
            }
        }
    }
    if (r == 0) r = build_uncached(ds, cfg, files, format, tok_path, model_tok);
    if (r == 0 && cache_path) r = qlt_dataset_cache_save(ds, cache_path, key);
    if (r != 0) qlt_dataset_free(ds);
    free(cache_path);
    free(tok_path);
    return r;
}


/* Recounts n_tokens / n_label_tokens: a token is real unless it is in a row's trailing padding segment
 * (a last segment that starts after 0 and holds only pad ids with labels -100). */
static void recount(qlt_dataset *ds, int32_t pad_id) {
    ds->n_tokens = ds->n_label_tokens = 0;
    int64_t s = ds->seq_len;
    for (int64_t r = 0; r < ds->n_rows; r++) {
        const int32_t *ids = ds->input_ids + r * s, *lab = ds->labels + r * s, *seg = ds->seg_start + r * s;
        int64_t real = s;
        int32_t last = seg[s - 1];
        int padding = 1;
        for (int64_t t = last; t < s; t++)
            if (ids[t] != pad_id || lab[t] != QLT_IGNORE_LABEL) padding = 0;
        if (padding && last > 0) real = last;
        ds->n_tokens += real;
        for (int64_t t = 0; t < s; t++) ds->n_label_tokens += lab[t] != QLT_IGNORE_LABEL;
    }
}

int qlt_dataset_split(qlt_dataset *train, qlt_dataset *eval, float fraction, uint64_t seed) {
    (void)seed; /* the split is positional: the trainer shuffles rows */
    memset(eval, 0, sizeof *eval);
    if (!(fraction > 0)) return 0;
    if (fraction >= 1) return qlt_fail("data.eval_split is %g: it must be below 1", fraction);
    int64_t n_eval = (int64_t)(fraction * (double)train->n_rows);
    if (n_eval < 1) n_eval = 1;
    if (n_eval >= train->n_rows)
        return qlt_fail("data.eval_split %g leaves no training rows (%lld rows in all): lower it or add data",
                        fraction, (long long)train->n_rows);
    int64_t keep = train->n_rows - n_eval, s = train->seq_len;
    size_t bytes = (size_t)(n_eval * s) * sizeof(int32_t);
    eval->seq_len = train->seq_len;
    eval->n_rows = n_eval;
    eval->input_ids = qlt_xmalloc(bytes);
    eval->labels = qlt_xmalloc(bytes);
    eval->seg_start = qlt_xmalloc(bytes);
    memcpy(eval->input_ids, train->input_ids + keep * s, bytes);
    memcpy(eval->labels, train->labels + keep * s, bytes);
    memcpy(eval->seg_start, train->seg_start + keep * s, bytes);
    int64_t tokens = train->n_tokens, labels = train->n_label_tokens;
    train->n_rows = keep;
    eval->pad_id = train->pad_id;
    recount(eval, train->pad_id);
    train->n_tokens = tokens - eval->n_tokens;
    train->n_label_tokens = labels - eval->n_label_tokens;
    return 0;
}

int qlt_dataset_max_row_examples(const qlt_dataset *ds) {
    int most = 0;
    for (int64_t r = 0; r < ds->n_rows; r++) {
        const int32_t *seg = ds->seg_start + r * ds->seq_len, *lab = ds->labels + r * ds->seq_len;
        /* the loss at token t predicts lab[t + 1]: an example starting at p matters when a label follows p */
        int last_label = -1; /* the last index t >= 1 with lab[t] != -100 */
        for (int t = ds->seq_len - 1; t >= 1 && last_label < 0; t--)
            if (lab[t] != -100) last_label = t;
        int count = 1; /* the row's first example always counts */
        for (int p = 1; p < ds->seq_len && p < last_label; p++)
            if (seg[p] == p) count++;
        if (count > most) most = count;
    }
    return most;
}

void qlt_dataset_free(qlt_dataset *ds) {
    free(ds->input_ids);
    free(ds->labels);
    free(ds->seg_start);
    memset(ds, 0, sizeof *ds);
}
