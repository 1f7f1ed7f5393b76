/* sweep_summary.c: a sweep's runs side by side. Each run's numbers come from its own metrics.jsonl (the
 * trainer's step records: loss, tokens_per_s, step_time_s, peak_bytes; its eval records: eval_loss), so the
 * tables can be rebuilt at any time from the run directories and the scheduler's statuses. */
#include "sweep/sweep_summary.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "common/fileutil.h"

const char *qlt_sweep_status_text(qlt_sweep_status s) {
    switch (s) {
    case QLT_SWEEP_PENDING: return "pending";
    case QLT_SWEEP_RUNNING: return "running";
    case QLT_SWEEP_DONE: return "done";
    case QLT_SWEEP_FAILED: return "failed";
    case QLT_SWEEP_SKIPPED: return "skipped";
    }
    return "?";
}

static int number_of(const cJSON *o, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return 0;
    *out = v->valuedouble;
    return 1;
}

void qlt_sweep_read_metrics(const char *run_dir, qlt_sweep_metrics *m) {
    memset(m, 0, sizeof *m);
    char *path = qlt_path_join(run_dir, "metrics.jsonl");
    char *text = NULL;
    if (!qlt_file_exists(path) || qlt_read_file(path, &text, NULL) != 0) {
        qlt_error_clear();
        free(path);
        return;
    }
    free(path);
    double tokens = 0, seconds = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        double step = 0, v, tps, dt, peak;
        if (o && number_of(o, "step", &step)) {
            if (number_of(o, "eval_loss", &v)) {
                if (!m->has_eval || v < m->best_eval_loss) m->best_eval_loss = v, m->best_step = (int64_t)step;
                m->has_eval = 1;
                m->final_eval_loss = v;
            } else if (number_of(o, "loss", &v)) {
                m->has_train = 1;
                m->final_train_loss = v;
                m->last_step = (int64_t)step;
                if (number_of(o, "tokens_per_s", &tps) && number_of(o, "step_time_s", &dt)) {
                    tokens += tps * dt;
                    seconds += dt;
                }
                if (number_of(o, "peak_bytes", &peak) && peak > (double)m->peak_bytes) m->peak_bytes = (size_t)peak;
            }
        }
        cJSON_Delete(o);
    }
    m->tokens_per_s = seconds > 0 ? tokens / seconds : 0;
    free(text);
}

/* ---- the tables -------------------------------------------------------------------------------------- */

typedef struct text_buf {
    char *s;
    size_t n, cap;
} text_buf;

static void put(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        b->cap = (b->cap + (size_t)k + 1) * 2;
        b->s = qlt_xrealloc(b->s, b->cap);
    }
}

/* A markdown cell: '|' escaped, no newlines. */
static void put_md(text_buf *b, const char *s) {
    put(b, " ");
    for (const char *p = s; *p; p++) {
        if (*p == '|') put(b, "\\|");
        else put(b, "%c", *p == '\n' ? ' ' : *p);
    }
    put(b, " |");
}

/* A CSV field (RFC 4180: quoted when it holds a comma, quote or newline). */
static void put_csv(text_buf *b, const char *s, int last) {
    if (strpbrk(s, ",\"\n")) {
        put(b, "\"");
        for (const char *p = s; *p; p++) {
            if (*p == '"') put(b, "\"\"");
            else put(b, "%c", *p);
        }
        put(b, "\"");
    } else {
        put(b, "%s", s);
    }
    put(b, last ? "\n" : ",");
}

static double sort_key(const qlt_sweep_metrics *m) { return m->has_eval && isfinite(m->best_eval_loss) ? m->best_eval_loss : INFINITY; }

static void format_bytes(size_t bytes, char *buf, size_t size) {
    if (bytes == 0) snprintf(buf, size, "-");
    else if (bytes >= (size_t)1 << 30) snprintf(buf, size, "%.2f GiB", (double)bytes / (1 << 30));
    else snprintf(buf, size, "%.1f MiB", (double)bytes / (1 << 20));
}

int qlt_sweep_write_summary(const qlt_sweep *sw, const qlt_sweep_result *results) {
    int n = sw->n_runs;
    qlt_sweep_metrics *m = qlt_xcalloc((size_t)n + 1, sizeof *m);
    int *order = qlt_xcalloc((size_t)n + 1, sizeof *order);
    int counts[QLT_SWEEP_SKIPPED + 1] = {0};
    for (int i = 0; i < n; i++) {
        qlt_sweep_read_metrics(sw->runs[i].dir, &m[i]);
        counts[results[i].status]++;
        int k = i; /* insertion sort: stable, so equal losses and runs without one keep run order */
        while (k > 0 && sort_key(&m[order[k - 1]]) > sort_key(&m[i])) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    text_buf md = {0}, csv = {0};
    put(&md, "# Sweep %s\n\nBase config %s, %d runs:", sw->path, sw->base, n);
    const char *sep = " ";
    for (int s = QLT_SWEEP_PENDING; s <= QLT_SWEEP_SKIPPED; s++) {
        if (!counts[s]) continue;
        put(&md, "%s%d %s", sep, counts[s], qlt_sweep_status_text((qlt_sweep_status)s));
        sep = ", ";
    }
    put(&md, ". Sorted by best eval loss (runs without one last); a blank value is the base config's.\n\n|");
    put_md(&md, "run");
    put_csv(&csv, "run", 0);
    for (int c = 0; c < sw->n_columns; c++) {
        put_md(&md, sw->columns[c]);
        put_csv(&csv, sw->columns[c], 0);
    }
    const char *heads[] = {"status", "best eval loss", "at step", "final eval loss", "final train loss", "tokens/s",
                           "peak memory", "wall time"};
    for (size_t h = 0; h < sizeof heads / sizeof *heads; h++) put_md(&md, heads[h]);
    put(&md, "\n|");
    for (size_t c = 0; c < 1 + (size_t)sw->n_columns + sizeof heads / sizeof *heads; c++) put(&md, "---|");
    put(&md, "\n");
    put(&csv, "status,reason,best_eval_loss,best_step,final_eval_loss,final_train_loss,tokens_per_s,peak_bytes,wall_s\n");
    for (int k = 0; k < n; k++) {
        int i = order[k];
        const qlt_sweep_run *r = &sw->runs[i];
        const qlt_sweep_result *res = &results[i];
        const qlt_sweep_metrics *x = &m[i];
        char status[640], best[32] = "", step[32] = "", fin[32] = "", train[32] = "", tps[32] = "", wall[32] = "",
             peak[32] = "", peak_raw[32] = "";
        if (res->status == QLT_SWEEP_FAILED) snprintf(status, sizeof status, "failed: %s", res->reason);
        else snprintf(status, sizeof status, "%s", qlt_sweep_status_text(res->status));
        if (x->has_eval) {
            snprintf(best, sizeof best, "%.4f", x->best_eval_loss);
            snprintf(step, sizeof step, "%lld", (long long)x->best_step);
            snprintf(fin, sizeof fin, "%.4f", x->final_eval_loss);
        }
        if (x->has_train) {
            snprintf(train, sizeof train, "%.4f", x->final_train_loss);
            snprintf(tps, sizeof tps, "%.0f", x->tokens_per_s);
        }
        if (x->peak_bytes) snprintf(peak_raw, sizeof peak_raw, "%zu", x->peak_bytes);
        format_bytes(x->peak_bytes, peak, sizeof peak);
        if (res->wall_s >= 0) snprintf(wall, sizeof wall, "%.1f", res->wall_s);
        put(&md, "|");
        put_md(&md, r->name);
        put_csv(&csv, r->name, 0);
        for (int c = 0; c < sw->n_columns; c++) {
            const char *v = qlt_sweep_run_value(r, sw->columns[c]);
            put_md(&md, v ? v : "");
            put_csv(&csv, v ? v : "", 0);
        }
        char wall_md[40];
        snprintf(wall_md, sizeof wall_md, "%s%s", wall[0] ? wall : "-", wall[0] ? " s" : "");
        const char *cells[] = {status, best[0] ? best : "-", step[0] ? step : "-", fin[0] ? fin : "-",
                               train[0] ? train : "-", tps[0] ? tps : "-", peak, wall_md};
        for (size_t h = 0; h < sizeof cells / sizeof *cells; h++) put_md(&md, cells[h]);
        put(&md, "\n");
        const char *fields[] = {qlt_sweep_status_text(res->status), res->status == QLT_SWEEP_FAILED ? res->reason : "",
                                best, step, fin, train, tps, peak_raw, wall};
        for (size_t f = 0; f < sizeof fields / sizeof *fields; f++)
            put_csv(&csv, fields[f], f + 1 == sizeof fields / sizeof *fields);
    }
    char *md_path = qlt_path_join(sw->out_dir, "summary.md"), *csv_path = qlt_path_join(sw->out_dir, "summary.csv");
    int rc = qlt_mkdirs(sw->out_dir);
    if (rc == 0) rc = qlt_write_file_atomic(md_path, md.s, md.n);
    if (rc == 0) rc = qlt_write_file_atomic(csv_path, csv.s, csv.n);
    free(md_path);
    free(csv_path);
    free(md.s);
    free(csv.s);
    free(order);
    free(m);
    return rc;
}
