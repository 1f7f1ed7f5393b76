/* progress.c: the run's status line and plain progress lines (see progress.h). */
#define _GNU_SOURCE
#include "train/progress.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/clock.h"

#define EMA_BETA 0.9          /* the smoothed loss and tokens/s: about the last ten steps */
#define REDRAW_SECONDS 0.1    /* a terminal is redrawn at most this often (the last step always) */
#define BAR_WIDTH 24

void qlt_progress_init(qlt_progress *p, FILE *out, int tty, int64_t first_step, int64_t total_steps, int log_every) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = tty;
    p->log_every = log_every;
    p->first_step = p->step = first_step;
    p->total_steps = total_steps;
    p->start_time = qlt_now_seconds();
    p->last_draw = -1e30;
}

void qlt_progress_format_duration(char *buf, size_t n, double seconds) {
    if (!(seconds >= 0) || seconds > 1e8) {
        snprintf(buf, n, "--:--");
        return;
    }
    long long s = (long long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(buf, n, "%02lld:%02lld", s / 60, s % 60);
}

void qlt_progress_format_bytes(char *buf, size_t n, double bytes) {
    if (bytes < 1024) snprintf(buf, n, "%.0f B", bytes);
    else if (bytes < 1048576.0) snprintf(buf, n, "%.1f KiB", bytes / 1024);
    else if (bytes < 1073741824.0) snprintf(buf, n, "%.1f MiB", bytes / 1048576.0);
    else snprintf(buf, n, "%.2f GiB", bytes / 1073741824.0);
}

/* Columns of the terminal (0: unknown, the line is not cut). */
static int terminal_columns(FILE *out) {
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0) return ws.ws_col;
    return 0;
}

static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

static void bar(char *buf, size_t cap, size_t *len, double fraction) {
    if (!(fraction >= 0)) fraction = 0;
    if (fraction > 1) fraction = 1;
    int filled = (int)(fraction * BAR_WIDTH + 0.5);
    char cells[BAR_WIDTH + 1];
    for (int i = 0; i < BAR_WIDTH; i++) cells[i] = i < filled ? '#' : '.';
    cells[BAR_WIDTH] = 0;
    append(buf, cap, len, "[%s]", cells);
}

/* The status line: the latest step, or the evaluation in progress. */
static void draw(qlt_progress *p) {
    char line[512];
    size_t len = 0;
    append(line, sizeof line, &len, "step %lld/%lld ", (long long)p->step, (long long)p->total_steps);
    if (p->eval_total > 0) {
        bar(line, sizeof line, &len, (double)p->eval_done / (double)p->eval_total);
        append(line, sizeof line, &len, " eval %lld/%lld batches", (long long)p->eval_done, (long long)p->eval_total);
    } else {
        bar(line, sizeof line, &len, p->total_steps > 0 ? (double)p->step / (double)p->total_steps : 0);
        append(line, sizeof line, &len, " %3.0f%%", p->total_steps > 0 ? 100.0 * p->step / p->total_steps : 0);
        if (p->n_ema > 0) {
            double debias = 1 - pow(EMA_BETA, (double)p->n_ema);
            append(line, sizeof line, &len, "  loss %.4f  lr %.2e  %.0f tok/s", p->loss_ema / debias, p->lr,
                   p->tokens_per_s_ema / debias);
        }
        if (p->skipped_steps > 0) append(line, sizeof line, &len, "  skipped %lld", (long long)p->skipped_steps);
    }
    char elapsed[32], eta[32];
    double now = qlt_now_seconds();
    qlt_progress_format_duration(elapsed, sizeof elapsed, now - p->start_time);
    double per_step = p->n_steps > 0 ? p->step_seconds_sum / (double)p->n_steps : NAN;
    qlt_progress_format_duration(eta, sizeof eta, per_step * (double)(p->total_steps - p->step));
    append(line, sizeof line, &len, "  %s ETA %s", elapsed, eta);
    if (p->mem_peak > 0) {
        char now_b[32], peak_b[32];
        qlt_progress_format_bytes(now_b, sizeof now_b, (double)p->mem_now);
        qlt_progress_format_bytes(peak_b, sizeof peak_b, (double)p->mem_peak);
        append(line, sizeof line, &len, "  mem %s (peak %s)", now_b, peak_b);
    }
    int cols = terminal_columns(p->out);
    if (cols > 1 && len > (size_t)(cols - 1)) line[cols - 1] = 0; /* a wrapped line could not be redrawn */
    fprintf(p->out, "\r%s\033[K", line);
    fflush(p->out);
    p->line_shown = 1;
    p->last_draw = now;
}

void qlt_progress_step(qlt_progress *p, const qlt_step_metrics *m, size_t mem_now, size_t mem_peak) {
    if (!m->valid) return;
    double tokens_per_s = m->seconds > 0 ? (double)m->tokens / m->seconds : 0.0;
    p->step = m->step;
    p->lr = m->lr;
    p->skipped_steps = m->skipped_steps;
    if (isfinite(m->loss)) { /* a skipped step's NaN would stay in the average for good */
        p->loss_ema = EMA_BETA * p->loss_ema + (1 - EMA_BETA) * m->loss;
        p->tokens_per_s_ema = EMA_BETA * p->tokens_per_s_ema + (1 - EMA_BETA) * tokens_per_s;
        p->n_ema++;
    }
    p->step_seconds_sum += m->seconds;
    p->n_steps++;
    p->mem_now = mem_now;
    p->mem_peak = mem_peak;
    int last = m->step == p->total_steps;
    if (p->tty) {
        if (last || p->n_steps == 1 || qlt_now_seconds() - p->last_draw >= REDRAW_SECONDS) draw(p);
        return;
    }
    int every = p->log_every;
    if (every > 0 && (m->step % every == 0 || last)) {
        char skipped[48] = "";
        if (m->skipped_steps > 0) snprintf(skipped, sizeof skipped, "  skipped %lld", (long long)m->skipped_steps);
        fprintf(p->out, "step %lld/%lld  loss %.4f  grad_norm %.4f  lr %.3g  %.0f tokens/s%s\n", (long long)m->step,
                (long long)p->total_steps, m->loss, m->grad_norm, m->lr, tokens_per_s, skipped);
    }
}

void qlt_progress_line(qlt_progress *p, const char *fmt, ...) {
    if (p->tty && p->line_shown) fputs("\r\033[K", p->out);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
    fflush(p->out);
    p->line_shown = 0;
    if (p->tty && (p->n_steps > 0 || p->eval_total > 0)) draw(p);
}

void qlt_progress_eval_begin(qlt_progress *p, int64_t step, int64_t rows, int64_t batches) {
    p->step = step;
    p->eval_done = 0;
    p->eval_total = batches > 0 ? batches : 1;
    if (p->tty) draw(p);
    else fprintf(p->out, "step %lld: evaluating %lld rows (%lld batches)\n", (long long)step, (long long)rows,
                 (long long)batches);
}

void qlt_progress_eval_batch(qlt_progress *p, int64_t done) {
    p->eval_done = done;
    if (p->tty && (done == p->eval_total || qlt_now_seconds() - p->last_draw >= REDRAW_SECONDS)) draw(p);
}

void qlt_progress_eval_end(qlt_progress *p) { p->eval_total = p->eval_done = 0; }

void qlt_progress_finish(qlt_progress *p) {
    if (p->tty && p->line_shown) {
        fputc('\n', p->out);
        fflush(p->out);
    }
    p->line_shown = 0;
}
