/* sweep_expand.c: the sweep's axes turned into runs. Grid runs come first (every combination, the last
 * key changing fastest), then random.n draws (each draw picks every random key from the seeded generator,
 * so the same file gives the same runs); random keys keep the base config's value in grid runs and the other
 * way round. A run's name is made from its values only, so a restarted sweep finds its runs again. */
#include "sweep/sweep.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "common/hash.h"
#include "common/rng.h"

enum { MAX_NAME = 120 }; /* longer names keep a prefix and a hash of the rest */

/* [0, 1) with 53 random bits. */
static double uniform01(qlt_rng *rng) { return (double)(qlt_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0); }

/* A drawn number as --set text: integers whole, floats in 4 significant digits, kept inside [lo, hi]. */
static char *format_draw(const qlt_sweep_axis *a, double v) {
    char buf[64];
    if (a->integer) {
        double r = round(v);
        if (r < ceil(a->lo)) r = ceil(a->lo);
        if (r > floor(a->hi)) r = floor(a->hi);
        snprintf(buf, sizeof buf, "%.0f", r);
    } else {
        snprintf(buf, sizeof buf, "%.4g", v);
        double back = strtod(buf, NULL);
        if (back < a->lo) snprintf(buf, sizeof buf, "%.17g", a->lo);
        if (back > a->hi) snprintf(buf, sizeof buf, "%.17g", a->hi);
    }
    return qlt_xstrdup(buf);
}

static char *draw(const qlt_sweep_axis *a, qlt_rng *rng) {
    switch (a->dist) {
    case QLT_SWEEP_LIST:
        return qlt_xstrdup(a->values[qlt_rng_below(rng, (uint64_t)a->n_values)]);
    case QLT_SWEEP_UNIFORM:
        if (a->integer) {
            double lo = ceil(a->lo), hi = floor(a->hi);
            return format_draw(a, lo + (double)qlt_rng_below(rng, (uint64_t)(hi - lo) + 1));
        }
        return format_draw(a, a->lo + uniform01(rng) * (a->hi - a->lo));
    case QLT_SWEEP_LOGUNIFORM: {
        double llo = log(a->lo), lhi = log(a->hi);
        return format_draw(a, exp(llo + uniform01(rng) * (lhi - llo)));
    }
    }
    QLT_ASSERT(0);
}

/* The part of a name for one value: numbers in their shortest form (1.0e-4 -> 0.0001), lists as a+b. */
static void value_label(const char *text, char *out, size_t size) {
    char *end;
    double v = strtod(text, &end);
    if (end != text && !*end && isfinite(v)) {
        if (v == floor(v) && fabs(v) < 1e15) snprintf(out, size, "%.0f", v);
        else snprintf(out, size, "%.6g", v);
        return;
    }
    size_t len = strlen(text), n = 0;
    int list = len >= 2 && text[0] == '[' && text[len - 1] == ']';
    for (size_t i = list; i < len - (size_t)list && n + 1 < size; i++) {
        if (list && text[i] == ',') {
            out[n++] = '+';
            while (text[i + 1] == ' ') i++;
        } else {
            out[n++] = text[i];
        }
    }
    out[n] = '\0';
}

/* The label of a key in names: its last part ("lr") unless another varied key ends the same way. */
static const char *key_label(const qlt_sweep *sw, const char *key) {
    const char *dot = strrchr(key, '.');
    const char *tail = dot ? dot + 1 : key;
    for (int i = 0; i < sw->n_columns; i++) {
        const char *other = sw->columns[i];
        const char *od = strrchr(other, '.');
        if (strcmp(other, key) != 0 && !strcmp(od ? od + 1 : other, tail)) return key;
    }
    return tail;
}

static char *make_name(const qlt_sweep *sw, const qlt_sweep_run *r) {
    size_t cap = 64, n = 0;
    char *name = qlt_xmalloc(cap);
    name[0] = '\0';
    for (int i = 0; i < r->n_set; i++) {
        char label[256];
        value_label(r->values[i], label, sizeof label);
        const char *k = key_label(sw, r->keys[i]);
        size_t need = n + strlen(k) + strlen(label) + 3;
        if (need > cap) name = qlt_xrealloc(name, cap = need * 2);
        n += (size_t)sprintf(name + n, "%s%s=%s", i ? "," : "", k, label);
    }
    for (char *p = name; *p; p++) /* filesystem-safe: no '/', no spaces, no shell-hostile characters */
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("._+=,-", *p)))
            *p = '_';
    if (n > MAX_NAME) {
        uint64_t h = qlt_hash64(name, n, 0x5377656570ull);
        snprintf(name + MAX_NAME - 17, 18, "-%016llx", (unsigned long long)h);
    }
    return name;
}

static qlt_sweep_run *add_run(qlt_sweep *sw, int n_set) {
    sw->runs = qlt_xrealloc(sw->runs, sizeof *sw->runs * (size_t)(sw->n_runs + 1));
    qlt_sweep_run *r = &sw->runs[sw->n_runs++];
    memset(r, 0, sizeof *r);
    r->n_set = n_set;
    r->keys = qlt_xcalloc((size_t)n_set, sizeof *r->keys);
    r->values = qlt_xcalloc((size_t)n_set, sizeof *r->values);
    return r;
}

/* Names the newest run; drops it (1) when an earlier run has the same name, i.e. the same values. */
static int name_or_drop(qlt_sweep *sw) {
    qlt_sweep_run *r = &sw->runs[sw->n_runs - 1];
    r->name = make_name(sw, r);
    for (int i = 0; i < sw->n_runs - 1; i++) {
        if (strcmp(sw->runs[i].name, r->name) != 0) continue;
        fprintf(stderr, "qlora-train: sweep: run %s comes twice (the same values): kept once\n", r->name);
        free(r->name);
        for (int k = 0; k < r->n_set; k++) free(r->values[k]);
        free(r->values);
        free(r->keys);
        sw->n_runs--;
        return 1;
    }
    r->dir = qlt_path_join(sw->out_dir, r->name);
    return 0;
}

int qlt_sweep_expand(qlt_sweep *sw) {
    sw->columns = qlt_xcalloc((size_t)(sw->n_grid + sw->n_random) + 1, sizeof *sw->columns);
    for (int i = 0; i < sw->n_grid; i++) sw->columns[sw->n_columns++] = sw->grid[i].key;
    for (int i = 0; i < sw->n_random; i++) sw->columns[sw->n_columns++] = sw->random[i].key;
    if (sw->n_grid > 0) {
        int64_t total = 1;
        for (int i = 0; i < sw->n_grid; i++) {
            total *= sw->grid[i].n_values;
            if (total > 100000)
                return qlt_fail("%s: the grid has more than 100000 combinations: vary fewer keys or values", sw->path);
        }
        for (int64_t c = 0; c < total; c++) {
            qlt_sweep_run *r = add_run(sw, sw->n_grid);
            int64_t rest = c;
            for (int i = sw->n_grid - 1; i >= 0; i--) { /* the last key changes fastest */
                const qlt_sweep_axis *a = &sw->grid[i];
                r->keys[i] = a->key;
                r->values[i] = qlt_xstrdup(a->values[rest % a->n_values]);
                rest /= a->n_values;
            }
            name_or_drop(sw);
        }
    }
    if (sw->n_random > 0) {
        qlt_rng rng;
        qlt_rng_seed(&rng, sw->random_seed);
        for (int64_t d = 0; d < sw->random_count; d++) {
            qlt_sweep_run *r = add_run(sw, sw->n_random);
            for (int i = 0; i < sw->n_random; i++) {
                r->keys[i] = sw->random[i].key;
                r->values[i] = draw(&sw->random[i], &rng);
            }
            name_or_drop(sw);
        }
    }
    return 0;
}

const char *qlt_sweep_run_value(const qlt_sweep_run *r, const char *key) {
    for (int i = 0; i < r->n_set; i++)
        if (!strcmp(r->keys[i], key)) return r->values[i];
    return NULL;
}
