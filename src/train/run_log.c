/* run_log.c: the run's metrics files, TensorBoard events, progress and loss plot (see run_log.h). */
#define _GNU_SOURCE
#include "train/run_log.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "train/loss_plot.h"
#include "train/metrics_csv.h"
#include "train/progress.h"
#include "train/tensorboard.h"

struct qlt_run_log {
    const qlt_config *cfg;
    qlt_backend *be;
    FILE *jsonl, *csv;
    qlt_tensorboard tb;
    qlt_progress progress;
    int quiet; /* qlt_run_log_open_quiet: every call does nothing */
};

/* The step a metrics line belongs to: metrics.jsonl's "step": N, metrics.csv's first field; -1 for none. */
static long long line_step(const char *line, size_t len) {
    if (len > 0 && isdigit((unsigned char)line[0])) return atoll(line);
    const char *k = memmem(line, len, "\"step\": ", 8);
    return k ? atoll(k + 8) : -1;
}

int qlt_run_log_truncate(const char *path, int64_t step) {
    char *text = NULL;
    size_t len = 0;
    if (!qlt_file_exists(path)) return 0;
    QLT_TRY(qlt_read_file(path, &text, &len));
    char *kept = qlt_xmalloc(len + 1);
    size_t n = 0;
    for (char *line = text; *line;) {
        char *end = strchr(line, '\n');
        size_t l = end ? (size_t)(end - line + 1) : strlen(line);
        if (line_step(line, l) <= step) {
            memcpy(kept + n, line, l);
            n += l;
        }
        line += l;
    }
    int rc = qlt_write_file_atomic(path, kept, n);
    free(kept);
    free(text);
    return rc;
}

static FILE *open_metrics_file(const char *dir, const char *name, int64_t first_step, int csv) {
    char *path = qlt_path_join(dir, name);
    FILE *f = NULL;
    if (first_step == 0 || qlt_run_log_truncate(path, first_step) == 0) {
        if (csv) f = qlt_metrics_csv_open(path, first_step > 0);
        else if (!(f = fopen(path, first_step > 0 ? "a" : "w"))) qlt_fail("%s: cannot write (check output.dir)", path);
    }
    free(path);
    return f;
}

/* A fresh run's events must not sit beside an earlier run's: TensorBoard would show them as one run. */
static int remove_old_events(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0) continue;
        char *path = qlt_path_join(dir, e->d_name);
        if (unlink(path) != 0) rc = qlt_fail("%s: cannot delete an earlier run's TensorBoard events file", path);
        free(path);
    }
    closedir(d);
    return rc;
}

qlt_run_log *qlt_run_log_open(const qlt_config *cfg, qlt_backend *be, int64_t first_step, int64_t total_steps) {
    qlt_run_log *log = qlt_xcalloc(1, sizeof *log);
    log->cfg = cfg;
    log->be = be;
    log->jsonl = open_metrics_file(cfg->output.dir, "metrics.jsonl", first_step, 0);
    if (log->jsonl) log->csv = open_metrics_file(cfg->output.dir, "metrics.csv", first_step, 1);
    int tb_ok = !cfg->output.tensorboard || ((first_step > 0 || remove_old_events(cfg->output.dir) == 0) &&
                                             qlt_tensorboard_open(&log->tb, cfg->output.dir) == 0);
    if (!log->jsonl || !log->csv || !tb_ok) {
        if (log->jsonl) fclose(log->jsonl);
        if (log->csv) fclose(log->csv);
        free(log);
        return NULL;
    }
    qlt_progress_init(&log->progress, stderr, isatty(fileno(stderr)), first_step, total_steps, cfg->train.log_every);
    return log;
}

qlt_run_log *qlt_run_log_open_quiet(const qlt_config *cfg) {
    qlt_run_log *log = qlt_xcalloc(1, sizeof *log);
    log->cfg = cfg;
    log->quiet = 1;
    return log;
}

/* TensorBoard scalars; a write failure is said once and ends the events file, not the run. */
static void tensorboard_write(qlt_run_log *log, int64_t step, const char *const *tags, const double *values, int n) {
    if (!log->tb.f || qlt_tensorboard_scalars(&log->tb, step, tags, values, n) == 0) return;
    qlt_progress_line(&log->progress, "qlora-train: warning: %s; no more TensorBoard events this run", qlt_error());
    qlt_tensorboard_close(&log->tb);
}

static void json_number(char *buf, size_t n, double v) {
    if (isfinite(v)) snprintf(buf, n, "%.9g", v);
    else snprintf(buf, n, "null");
}

void qlt_run_log_step(qlt_run_log *log, const qlt_step_metrics *m) {
    if (!m->valid || log->quiet) return;
    double tokens_per_s = m->seconds > 0 ? (double)m->tokens / m->seconds : 0.0;
    const size_t peak_bytes = log->be && log->be->peak_bytes ? log->be->peak_bytes(log->be) : 0;
    char loss[32], grad_norm[32]; /* a skipped step's NaN / infinity is null: JSON has no such numbers */
    json_number(loss, sizeof loss, m->loss);
    json_number(grad_norm, sizeof grad_norm, m->grad_norm);
    fprintf(log->jsonl,
            "{\"step\": %lld, \"loss\": %s, \"grad_norm\": %s, \"lr\": %.9g, \"tokens\": %lld, "
            "\"tokens_per_s\": %.1f, \"counted_tokens\": %lld, \"epoch\": %.4f, \"step_time_s\": %.4f, "
            "\"peak_bytes\": %zu, \"skipped_steps\": %lld}\n",
            (long long)m->step, loss, grad_norm, m->lr, (long long)m->tokens_seen, tokens_per_s,
            (long long)m->counted, m->epoch, m->seconds, peak_bytes, (long long)m->skipped_steps);
    fflush(log->jsonl);
    qlt_metrics_csv_step(log->csv, m);
    static const char *const tags[] = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s"};
    double values[] = {m->loss, m->lr, m->grad_norm, tokens_per_s};
    tensorboard_write(log, m->step, tags, values, 4);
    size_t now = 0; /* only the status line shows it */
    if (log->progress.tty && log->be && log->be->live_bytes) now = log->be->live_bytes(log->be);
    qlt_progress_step(&log->progress, m, now, peak_bytes);
}

void qlt_run_log_eval_begin(qlt_run_log *log, int64_t step, int64_t rows, int64_t batches) {
    if (log->quiet) return;
    qlt_progress_eval_begin(&log->progress, step, rows, batches);
}

void qlt_run_log_eval_progress(void *ctx, int64_t done, int64_t total) {
    qlt_run_log *log = ctx;
    if (log->quiet) return;
    qlt_progress_eval_batch(&log->progress, done);
}

void qlt_run_log_eval(qlt_run_log *log, int64_t step, double loss, int64_t counted) {
    if (log->quiet) return;
    fprintf(log->jsonl, "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_perplexity\": %.9g, \"eval_tokens\": %lld}\n",
            (long long)step, loss, exp(loss), (long long)counted);
    fflush(log->jsonl);
    qlt_metrics_csv_eval(log->csv, step, loss, counted);
    static const char *const tags[] = {"eval/loss"};
    tensorboard_write(log, step, tags, &loss, 1);
    qlt_progress_eval_end(&log->progress);
    qlt_progress_line(&log->progress, "step %lld: eval_loss %.4f (perplexity %.2f)", (long long)step, loss, exp(loss));
}

void qlt_run_log_saved(qlt_run_log *log, int64_t step, const char *dir) {
    if (log->quiet) return;
    qlt_progress_line(&log->progress, "step %lld: checkpoint saved to %s", (long long)step, dir);
}

int qlt_run_log_close(qlt_run_log *log, int run_ok) {
    if (!log) return 0;
    if (log->quiet) {
        free(log);
        return 0;
    }
    char *run_error = run_ok ? NULL : qlt_xstrdup(qlt_error()); /* what the run failed with is what gets said */
    qlt_progress_eval_end(&log->progress);
    qlt_progress_finish(&log->progress);
    fclose(log->jsonl);
    fclose(log->csv);
    if (qlt_tensorboard_close(&log->tb) != 0)
        fprintf(stderr, "qlora-train: warning: %s\n", qlt_error());
    char *png = qlt_path_join(log->cfg->output.dir, "loss.png");
    const char *dirs[] = {log->cfg->output.dir};
    int plotted = run_ok && qlt_loss_plot_available();
    if (plotted && qlt_loss_plot(dirs, 1, png) != 0) {
        fprintf(stderr, "qlora-train: warning: no loss plot: %s\n", qlt_error());
        plotted = 0;
    }
    free(png);
    if (run_error) qlt_fail("%s", run_error);
    free(run_error);
    free(log);
    return plotted;
}
