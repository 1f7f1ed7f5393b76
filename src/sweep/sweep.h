/* sweep.h: a hyperparameter sweep as a plan of runs. A sweep file (YAML or JSON) names a base run config and
 * the keys to vary; qlt_sweep_load reads it (sweep_file.c) and expands it into runs (sweep_expand.c): first
 * every combination of `grid`, then the `random` draws. Each run is a list of --set assignments and a
 * directory name made from its values. Running them is sweep_runner.h's job, the tables sweep_summary.h's. */
#ifndef QLT_SWEEP_H
#define QLT_SWEEP_H

#include <stdint.h>

/* How one varied key gets its values. */
typedef enum qlt_sweep_dist {
    QLT_SWEEP_LIST,       /* one of a list of values (grid: each of them) */
    QLT_SWEEP_UNIFORM,    /* random: uniform in [lo, hi] (integer keys: each integer equally likely) */
    QLT_SWEEP_LOGUNIFORM, /* random: log-uniform in [lo, hi], lo > 0 */
} qlt_sweep_dist;

typedef struct qlt_sweep_axis {
    char *key;          /* "train.lr": a key of the run config */
    int64_t line;       /* its line in the sweep file */
    int integer;        /* the key holds an integer (int, int64, uint64): draws are whole numbers */
    qlt_sweep_dist dist;
    int n_values;       /* LIST: the values, each as `--set key=VALUE` takes it ("1.0e-4", "[q, v]") */
    char **values;
    double lo, hi;      /* UNIFORM / LOGUNIFORM: the closed range */
} qlt_sweep_axis;

typedef struct qlt_sweep_run {
    char *name;         /* directory name from the values: "lr=0.0001,r=8" (filesystem-safe, stable) */
    char *dir;          /* <output.dir>/<name> */
    int n_set;          /* the run's varied values, in axis order */
    const char **keys;  /* [n_set], pointing at the axes' keys */
    char **values;      /* [n_set], the value texts passed to --set */
} qlt_sweep_run;

typedef struct qlt_sweep {
    char *path;                 /* the sweep file as given */
    char *base;                 /* the base run config, resolved against the sweep file's directory */
    char *out_dir;              /* output.dir, resolved the same way */
    int n_grid;                 /* grid axes (every combination) */
    qlt_sweep_axis *grid;
    int n_random;               /* random axes (random.n draws of all of them together) */
    qlt_sweep_axis *random;
    int64_t random_count;       /* random.n */
    uint64_t random_seed;       /* random.seed (default 0) */
    int n_runs;
    qlt_sweep_run *runs;
    int n_columns;              /* every varied key once, grid keys first (the summary's columns) */
    const char **columns;
} qlt_sweep;

/* Reads and expands the sweep file at `path`. Errors are one line naming the file, line and key
 * ("sweep.yaml:4: unknown key 'train.lrr' (did you mean 'train.lr'?)"). Does not read the base config's
 * values: a value the run config refuses makes that run fail, not the sweep. */
int qlt_sweep_load(qlt_sweep *sw, const char *path);
void qlt_sweep_free(qlt_sweep *sw);

/* Private to src/sweep: fills sw->runs and sw->columns from the axes (sweep_expand.c). */
int qlt_sweep_expand(qlt_sweep *sw);

/* The value of `key` in run r, or NULL when r does not vary it (it has the base config's value). */
const char *qlt_sweep_run_value(const qlt_sweep_run *r, const char *key);

#endif
