/* loss_plot.c: the loss / learning-rate figure (see loss_plot.h). Figure coordinates are pixels of a
 * 1000 x 720 page; each panel maps its data box onto a rectangle with "nice" ticks (1, 2 or 5 times a power
 * of ten). */
#define _GNU_SOURCE
#include "train/loss_plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "train/run_metrics.h"

#ifndef QLT_HAVE_CAIRO

int qlt_loss_plot_available(void) { return 0; }

int qlt_loss_plot(const char *const *run_dirs, int n, const char *out_path) {
    return qlt_fail("this build has no cairo, so it cannot draw plots: install libcairo2-dev (scripts/setup.sh "
                    "does) and rebuild");
}

#else

#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>

#define FIG_W 1000.0
#define FIG_H 720.0

typedef struct panel {
    double x0, y0, x1, y1;         /* the plotting rectangle in figure pixels (y0 on top) */
    double dx0, dx1, dy0, dy1;     /* the data box */
} panel;

static const double run_colours[][3] = {{0.12, 0.47, 0.71}, {0.84, 0.15, 0.16}, {0.17, 0.63, 0.17},
                                        {1.00, 0.50, 0.05}, {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29},
                                        {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}};
#define N_COLOURS ((int)(sizeof run_colours / sizeof run_colours[0]))

static double px(const panel *p, double x) { return p->x0 + (x - p->dx0) / (p->dx1 - p->dx0) * (p->x1 - p->x0); }
static double py(const panel *p, double y) { return p->y1 - (y - p->dy0) / (p->dy1 - p->dy0) * (p->y1 - p->y0); }

/* A tick spacing of 1, 2 or 5 times a power of ten giving about `target` ticks over [lo, hi]. */
static double nice_step(double lo, double hi, int target) {
    double raw = (hi - lo) / target;
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* Widens [*lo, *hi] to tick multiples (and a flat range to a visible one). */
static void nice_range(double *lo, double *hi) {
    if (!(*hi > *lo)) {
        double pad = *lo != 0 ? fabs(*lo) * 0.1 : 1;
        *lo -= pad;
        *hi += pad;
    }
    double step = nice_step(*lo, *hi, 5);
    *lo = floor(*lo / step + 1e-9) * step;
    *hi = ceil(*hi / step - 1e-9) * step;
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double align_x, double align_y) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - e.width * align_x - e.x_bearing, y - e.height * align_y - e.y_bearing);
    cairo_show_text(cr, s);
}

static void format_tick(char *buf, size_t n, double v, double step, int scientific) {
    if (fabs(v) < step * 1e-6) v = 0;
    if (scientific && v == 0) snprintf(buf, n, "0");
    else if (scientific) snprintf(buf, n, "%.1e", v);
    else if (step >= 1) snprintf(buf, n, "%.0f", v);
    else snprintf(buf, n, "%.*f", (int)ceil(-log10(step) - 1e-9), v);
}

/* The frame, grid, ticks and labels of a panel. */
static void draw_axes(cairo_t *cr, const panel *p, const char *xlabel, const char *ylabel, int y_scientific) {
    cairo_set_font_size(cr, 13);
    double xs = nice_step(p->dx0, p->dx1, 8), ys = nice_step(p->dy0, p->dy1, 5);
    char buf[64];
    cairo_set_line_width(cr, 1);
    for (double x = ceil(p->dx0 / xs - 1e-9) * xs; x <= p->dx1 + xs * 1e-9; x += xs) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, px(p, x), p->y0);
        cairo_line_to(cr, px(p, x), p->y1);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, px(p, x), p->y1);
        cairo_line_to(cr, px(p, x), p->y1 + 5);
        cairo_stroke(cr);
        format_tick(buf, sizeof buf, x, xs, 0);
        text_at(cr, px(p, x), p->y1 + 9, buf, 0.5, 0);
    }
    for (double y = ceil(p->dy0 / ys - 1e-9) * ys; y <= p->dy1 + ys * 1e-9; y += ys) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, p->x0, py(p, y));
        cairo_line_to(cr, p->x1, py(p, y));
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, p->x0 - 5, py(p, y));
        cairo_line_to(cr, p->x0, py(p, y));
        cairo_stroke(cr);
        format_tick(buf, sizeof buf, y, ys, y_scientific);
        text_at(cr, p->x0 - 9, py(p, y), buf, 1, 0.5);
    }
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_rectangle(cr, p->x0, p->y0, p->x1 - p->x0, p->y1 - p->y0);
    cairo_stroke(cr);
    cairo_set_font_size(cr, 14);
    if (xlabel) text_at(cr, (p->x0 + p->x1) / 2, p->y1 + 30, xlabel, 0.5, 0);
    cairo_save(cr);
    cairo_translate(cr, p->x0 - 78, (p->y0 + p->y1) / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, 0, 0, ylabel, 0.5, 0.5);
    cairo_restore(cr);
}

/* A polyline through the finite points (a gap at a non-finite one); dots at each point when `dots`. */
static void draw_series(cairo_t *cr, const panel *p, const int64_t *xs, const double *ys, int64_t n, int dots) {
    int pen_down = 0;
    cairo_save(cr);
    cairo_rectangle(cr, p->x0, p->y0, p->x1 - p->x0, p->y1 - p->y0);
    cairo_clip(cr);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ys[i])) {
            pen_down = 0;
            continue;
        }
        if (pen_down) cairo_line_to(cr, px(p, (double)xs[i]), py(p, ys[i]));
        else cairo_move_to(cr, px(p, (double)xs[i]), py(p, ys[i]));
        pen_down = 1;
    }
    cairo_stroke(cr);
    if (dots) {
        cairo_set_dash(cr, NULL, 0, 0);
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(ys[i])) continue;
            cairo_arc(cr, px(p, (double)xs[i]), py(p, ys[i]), 3.5, 0, 2 * M_PI);
            cairo_fill(cr);
        }
    }
    cairo_restore(cr);
}

static void extend(double *lo, double *hi, double v) {
    if (!isfinite(v)) return;
    if (v < *lo) *lo = v;
    if (v > *hi) *hi = v;
}

/* The run's name in the legend: its directory's last component. */
static const char *run_name(const char *path, char *buf, size_t n) {
    snprintf(buf, n, "%s", path);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
    if (len > 14 && strcmp(buf + len - 14, "/metrics.jsonl") == 0) buf[len -= 14] = 0;
    char *slash = strrchr(buf, '/');
    return slash && slash[1] ? slash + 1 : buf;
}

static void draw_figure(cairo_t *cr, const char *const *run_dirs, const qlt_run_metrics *runs, int n) {
    panel loss = {90, 60, FIG_W - 30, 430, INFINITY, -INFINITY, INFINITY, -INFINITY};
    panel lr = {90, 500, FIG_W - 30, FIG_H - 60, 0, 0, INFINITY, -INFINITY};
    for (int r = 0; r < n; r++) {
        const qlt_run_metrics *m = &runs[r];
        for (int64_t i = 0; i < m->n_steps; i++) {
            extend(&loss.dx0, &loss.dx1, (double)m->step[i]);
            extend(&loss.dy0, &loss.dy1, m->loss[i]);
            extend(&lr.dy0, &lr.dy1, m->lr[i]);
        }
        for (int64_t i = 0; i < m->n_evals; i++) {
            extend(&loss.dx0, &loss.dx1, (double)m->eval_step[i]);
            extend(&loss.dy0, &loss.dy1, m->eval_loss[i]);
        }
    }
    if (!isfinite(loss.dx0)) loss.dx0 = 0, loss.dx1 = 1;
    if (!isfinite(loss.dy0)) loss.dy0 = 0, loss.dy1 = 1;
    if (!isfinite(lr.dy0)) lr.dy0 = 0, lr.dy1 = 1;
    if (loss.dx0 > 0) loss.dx0 = 0;
    nice_range(&loss.dx0, &loss.dx1);
    nice_range(&loss.dy0, &loss.dy1);
    if (lr.dy0 > 0) lr.dy0 = 0;
    nice_range(&lr.dy0, &lr.dy1);
    lr.dx0 = loss.dx0;
    lr.dx1 = loss.dx1;

    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, 18);
    cairo_set_source_rgb(cr, 0, 0, 0);
    char name[512];
    char title[700];
    if (n == 1) snprintf(title, sizeof title, "%s: loss and learning rate", run_name(run_dirs[0], name, sizeof name));
    else snprintf(title, sizeof title, "%d runs: loss and learning rate", n);
    text_at(cr, FIG_W / 2, 22, title, 0.5, 0);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    draw_axes(cr, &loss, NULL, "loss", 0);
    draw_axes(cr, &lr, "step", "learning rate", 1);

    static const double dash[] = {6, 4};
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (int r = 0; r < n; r++) {
        const qlt_run_metrics *m = &runs[r];
        const double *c = run_colours[r % N_COLOURS];
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        cairo_set_line_width(cr, 1.8);
        draw_series(cr, &loss, m->step, m->loss, m->n_steps, m->n_steps == 1);
        draw_series(cr, &lr, m->step, m->lr, m->n_steps, m->n_steps == 1);
        cairo_set_dash(cr, dash, 2, 0);
        draw_series(cr, &loss, m->eval_step, m->eval_loss, m->n_evals, 1);
        cairo_set_dash(cr, NULL, 0, 0);
    }

    /* the legend, in the loss panel's upper right corner: a line per run and kind */
    cairo_set_font_size(cr, 13);
    double width = 0;
    int rows = 0;
    for (int r = 0; r < n; r++) {
        cairo_text_extents_t e;
        char label[600];
        snprintf(label, sizeof label, "%s eval", run_name(run_dirs[r], name, sizeof name));
        cairo_text_extents(cr, label, &e);
        if (e.x_advance > width) width = e.x_advance;
        rows += 1 + (runs[r].n_evals > 0);
    }
    double lx = loss.x1 - width - 60, ly = loss.y0 + 10, row_h = 20;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_rectangle(cr, lx - 8, ly - 4, width + 58, rows * row_h + 8);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    int row = 0;
    for (int r = 0; r < n; r++) {
        const double *c = run_colours[r % N_COLOURS];
        for (int kind = 0; kind < 1 + (runs[r].n_evals > 0); kind++, row++) {
            double y = ly + row * row_h + row_h / 2;
            cairo_set_source_rgb(cr, c[0], c[1], c[2]);
            cairo_set_line_width(cr, 1.8);
            if (kind) cairo_set_dash(cr, dash, 2, 0);
            cairo_move_to(cr, lx, y);
            cairo_line_to(cr, lx + 36, y);
            cairo_stroke(cr);
            cairo_set_dash(cr, NULL, 0, 0);
            if (kind) {
                cairo_arc(cr, lx + 18, y, 3.5, 0, 2 * M_PI);
                cairo_fill(cr);
            }
            char label[600];
            snprintf(label, sizeof label, "%s %s", run_name(run_dirs[r], name, sizeof name), kind ? "eval" : "train");
            cairo_set_source_rgb(cr, 0, 0, 0);
            text_at(cr, lx + 44, y, label, 0, 0.5);
        }
    }
}

int qlt_loss_plot_available(void) { return 1; }

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

int qlt_loss_plot(const char *const *run_dirs, int n, const char *out_path) {
    int svg = ends_with(out_path, ".svg");
    if (!svg && !ends_with(out_path, ".png"))
        return qlt_fail("%s: the plot's file name must end in .png or .svg", out_path);
    if (n <= 0) return qlt_fail("no run to plot: name at least one run directory");
    qlt_run_metrics *runs = qlt_xcalloc((size_t)n, sizeof *runs);
    int rc = 0, read = 0;
    for (; read < n && rc == 0; read++) rc = qlt_run_metrics_read(run_dirs[read], &runs[read]);
    if (rc != 0) read--;
    for (int r = 0; rc == 0 && r < n; r++)
        if (runs[r].n_steps == 0 && runs[r].n_evals == 0)
            rc = qlt_fail("%s: its metrics.jsonl holds no step yet: nothing to plot", run_dirs[r]);
    if (rc == 0) {
        cairo_surface_t *surface = svg ? cairo_svg_surface_create(out_path, FIG_W, FIG_H)
                                       : cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)FIG_W, (int)FIG_H);
        cairo_t *cr = cairo_create(surface);
        draw_figure(cr, run_dirs, runs, n);
        cairo_status_t status = cairo_status(cr);
        cairo_destroy(cr);
        if (status == CAIRO_STATUS_SUCCESS && !svg) status = cairo_surface_write_to_png(surface, out_path);
        cairo_surface_finish(surface);
        if (status == CAIRO_STATUS_SUCCESS) status = cairo_surface_status(surface);
        cairo_surface_destroy(surface);
        /* cairo's and fontconfig's caches freed: nothing of them outlives the plot (LeakSanitizer stays quiet) */
        cairo_debug_reset_static_data();
        FcFini();
        if (status != CAIRO_STATUS_SUCCESS)
            rc = qlt_fail("%s: cannot write the plot (%s): check the directory exists and is writable", out_path,
                          cairo_status_to_string(status));
    }
    for (int r = 0; r < read; r++) qlt_run_metrics_free(&runs[r]);
    free(runs);
    return rc;
}

#endif
