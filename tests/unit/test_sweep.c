/* test_sweep.c: `qlora-train sweep`. In process: the sweep file's expansion (the grid's product in order, random
 * draws reproducible, inside their ranges and log-uniform where asked, integer keys whole, run names safe and
 * stable) and its one-line errors. Through the binary, on the tiny-qwen3 fixture on the CPU (runs of 4 steps):
 * a 2x2 grid stopped after two runs (QLT_SWEEP_STOP_AFTER) and started again (finished runs skipped, an
 * unfinished one resumed from its checkpoint, the tokenized data cached once for every run, the summaries
 * complete and sorted), a run that fails while the others finish, --dry-run and --help. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "sweep/sweep.h"
#include "test_util.h"

/* Writes text to <dir>/<name> and returns the path (heap). */
static char *write_in(const char *dir, const char *name, const char *text) {
    char *path = qlt_path_join(dir, name);
    test_write_text(path, text);
    return path;
}

static void load_ok(qlt_sweep *sw, const char *path) {
    cr_assert_eq(qlt_sweep_load(sw, path), 0, "%s", qlt_error());
}

static char *read_text(const char *dir, const char *name) {
    char *path = qlt_path_join(dir, name), *text = NULL;
    cr_assert_eq(qlt_read_file(path, &text, NULL), 0, "%s", qlt_error());
    free(path);
    return text;
}

/* ---- expansion -------------------------------------------------------------------------------------------- */

Test(sweep, grid_is_the_product_in_order) {
    char *tmp = test_tmpdir();
    char *path = write_in(tmp, "s.yaml",
                          "base: base.yaml\n"
                          "output: {dir: out}\n"
                          "grid: {train.lr: [1.0e-4, 2.0e-4, 3.0e-4], lora.r: [8, 16]}\n");
    qlt_sweep sw;
    load_ok(&sw, path);
    char want_base[512], want_out[512];
    snprintf(want_base, sizeof want_base, "%s/base.yaml", tmp);
    snprintf(want_out, sizeof want_out, "%s/out", tmp);
    cr_assert_str_eq(sw.base, want_base, "paths are relative to the sweep file");
    cr_assert_str_eq(sw.out_dir, want_out);
    cr_assert_eq(sw.n_runs, 6);
    const char *names[] = {"lr=0.0001,r=8", "lr=0.0001,r=16", "lr=0.0002,r=8",
                           "lr=0.0002,r=16", "lr=0.0003,r=8", "lr=0.0003,r=16"};
    const char *lrs[] = {"1.0e-4", "1.0e-4", "2.0e-4", "2.0e-4", "3.0e-4", "3.0e-4"};
    for (int i = 0; i < 6; i++) {
        const qlt_sweep_run *r = &sw.runs[i];
        cr_assert_str_eq(r->name, names[i]);
        cr_assert_eq(r->n_set, 2);
        cr_assert_str_eq(r->keys[0], "train.lr");
        cr_assert_str_eq(r->values[0], lrs[i], "values go to --set as written");
        cr_assert_str_eq(qlt_sweep_run_value(r, "lora.r"), i % 2 ? "16" : "8");
        char dir[1100];
        snprintf(dir, sizeof dir, "%s/%s", want_out, names[i]);
        cr_assert_str_eq(r->dir, dir);
    }
    cr_assert_eq(sw.n_columns, 2);
    cr_assert_str_eq(sw.columns[1], "lora.r");
    qlt_sweep_free(&sw);
    free(path);
    free(tmp);
}

Test(sweep, paths_are_relative_to_the_sweep_file) {
    char *tmp = test_tmpdir();
    char *sub = qlt_path_join(tmp, "sub");
    cr_assert_eq(qlt_mkdirs(sub), 0);
    char *path = write_in(sub, "s.yaml", "base: ../base.yaml\noutput: {dir: ./runs/../o}\ngrid: {lora.r: [8]}\n");
    qlt_sweep sw;
    load_ok(&sw, path);
    char want[512];
    snprintf(want, sizeof want, "%s/base.yaml", tmp);
    cr_assert_str_eq(sw.base, want);
    snprintf(want, sizeof want, "%s/o/r=8", sub);
    cr_assert_str_eq(sw.runs[0].dir, want);
    qlt_sweep_free(&sw);
    free(path);
    free(sub);
    free(tmp);
}

static const char *random_file(uint64_t seed) {
    static char text[1024];
    snprintf(text, sizeof text,
             "base: base.yaml\n"
             "output: {dir: out}\n"
             "random:\n"
             "  n: 200\n"
             "  seed: %llu\n"
             "  keys:\n"
             "    train.lr: {loguniform: [1.0e-5, 1.0e-3]}\n"
             "    lora.r: {uniform: [4, 32]}\n"
             "    train.warmup_ratio: {uniform: [0, 0.1]}\n"
             "    lora.alpha: [16, 32]\n",
             (unsigned long long)seed);
    return text;
}

Test(sweep, random_draws_are_reproducible_and_in_range) {
    char *tmp = test_tmpdir();
    char *a_path = write_in(tmp, "a.yaml", random_file(0)), *b_path = write_in(tmp, "b.yaml", random_file(0));
    char *c_path = write_in(tmp, "c.yaml", random_file(1));
    qlt_sweep a, b, c;
    load_ok(&a, a_path);
    load_ok(&b, b_path);
    load_ok(&c, c_path);
    cr_assert_gt(a.n_runs, 190, "only repeated draws are dropped (%d runs)", a.n_runs);
    cr_assert_eq(a.n_runs, b.n_runs);
    int below_mid = 0, differs = 0, alpha16 = 0, r_lo = 0, r_hi = 0;
    for (int i = 0; i < a.n_runs; i++) {
        const qlt_sweep_run *r = &a.runs[i];
        cr_assert_str_eq(r->name, b.runs[i].name, "the same seed gives the same runs");
        differs += i < c.n_runs && strcmp(r->name, c.runs[i].name) != 0;
        double lr = atof(qlt_sweep_run_value(r, "train.lr"));
        cr_assert(lr >= 1e-5 && lr <= 1e-3, "train.lr %g outside [1e-5, 1e-3]", lr);
        below_mid += lr < 1e-4;
        const char *rank = qlt_sweep_run_value(r, "lora.r");
        char *end;
        long v = strtol(rank, &end, 10);
        cr_assert(!*end, "lora.r is an integer key: '%s' must be a whole number", rank);
        cr_assert(v >= 4 && v <= 32, "lora.r %ld outside [4, 32]", v);
        r_lo += v == 4;
        r_hi += v == 32;
        double w = atof(qlt_sweep_run_value(r, "train.warmup_ratio"));
        cr_assert(w >= 0 && w <= 0.1, "warmup_ratio %g", w);
        const char *alpha = qlt_sweep_run_value(r, "lora.alpha");
        cr_assert(!strcmp(alpha, "16") || !strcmp(alpha, "32"), "lora.alpha %s is not from its list", alpha);
        alpha16 += !strcmp(alpha, "16");
    }
    /* log-uniform on [1e-5, 1e-3]: half the draws lie below 1e-4 (uniform would put 9% there) */
    cr_assert(below_mid > a.n_runs * 35 / 100 && below_mid < a.n_runs * 65 / 100, "%d of %d draws below 1e-4",
              below_mid, a.n_runs);
    cr_assert(alpha16 > a.n_runs / 4 && alpha16 < a.n_runs * 3 / 4, "lora.alpha 16 drawn %d times", alpha16);
    cr_assert(r_lo > 0 && r_hi > 0, "the integer range's ends are drawn too (%d x 4, %d x 32)", r_lo, r_hi);
    cr_assert_gt(differs, a.n_runs / 2, "another seed gives other runs");
    qlt_sweep_free(&a);
    qlt_sweep_free(&b);
    qlt_sweep_free(&c);
    free(a_path);
    free(b_path);
    free(c_path);
    free(tmp);
}

Test(sweep, grid_runs_then_random_runs_and_safe_names) {
    char *tmp = test_tmpdir();
    char *path = write_in(tmp, "s.json",
                          "{\"base\": \"/abs/base.yaml\", \"output\": {\"dir\": \"/abs/out\"},\n"
                          " \"grid\": {\"lora.targets\": [[\"q\", \"v\"], \"all-linear\"], \"data.threads\": [1, 1]},\n"
                          " \"random\": {\"n\": 3, \"seed\": 5, \"keys\": {\"train.threads\": [2], "
                          "\"output.sample_prompt\": [\"a/b c\"]}}}\n");
    qlt_sweep sw;
    load_ok(&sw, path);
    cr_assert_str_eq(sw.base, "/abs/base.yaml", "absolute paths stay as they are");
    /* the grid's repeated value and the random draws that repeat each other are kept once */
    cr_assert_eq(sw.n_runs, 3, "2 grid runs + 1 distinct random run, got %d", sw.n_runs);
    cr_assert_str_eq(sw.runs[0].values[0], "[q, v]");
    /* data.threads and train.threads share their last part: both names keep the section */
    cr_assert_str_eq(sw.runs[0].name, "targets=q+v,data.threads=1");
    cr_assert_str_eq(sw.runs[1].name, "targets=all-linear,data.threads=1");
    cr_assert_str_eq(sw.runs[2].name, "train.threads=2,sample_prompt=a_b_c", "no '/' or spaces in names");
    cr_assert_null(qlt_sweep_run_value(&sw.runs[2], "lora.targets"), "random runs keep the base's grid keys");
    cr_assert_eq(sw.n_columns, 4);
    qlt_sweep_free(&sw);
    free(path);
    free(tmp);
}

Test(sweep, long_names_are_shortened_stably) {
    char *tmp = test_tmpdir();
    char *path = write_in(tmp, "s.yaml",
                          "base: b.yaml\noutput: {dir: o}\n"
                          "grid: {output.sample_prompt: [\"Mr. President, what is your message to the nation on "
                          "education, on jobs, on health care and on everything else that matters?\", "
                          "\"Mr. President, what is your message to the nation on education, on jobs, on health care "
                          "and on everything else that matters now?\"]}\n");
    qlt_sweep a, b;
    load_ok(&a, path);
    load_ok(&b, path);
    cr_assert_eq(a.n_runs, 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_leq(strlen(a.runs[i].name), 120, "%s", a.runs[i].name);
        cr_assert_str_eq(a.runs[i].name, b.runs[i].name);
    }
    cr_assert_str_neq(a.runs[0].name, a.runs[1].name, "a hash of the whole name tells them apart");
    qlt_sweep_free(&a);
    qlt_sweep_free(&b);
    free(path);
    free(tmp);
}

typedef struct bad_case {
    const char *body;     /* after "base: b.yaml\noutput: {dir: o}\n" */
    const char *expected; /* the whole message after "<path>:" */
} bad_case;

Test(sweep, bad_sweep_files_give_one_line_errors) {
    const bad_case cases[] = {
        {"grid: {train.lrr: [1]}\n", "3: unknown key 'train.lrr' (did you mean 'train.lr'?)"},
        {"random: {n: 2, keys: {lora.rr: [1]}}\n", "3: unknown key 'lora.rr' (did you mean 'lora.r'?)"},
        {"random: {n: 2, keys: {train.schedule: {uniform: [0, 1]}}}\n",
         "3: 'train.schedule' is not a number key: give it a list of values instead of a uniform range"},
        {"random: {n: 2, keys: {train.lr: {loguniform: [0, 1]}}}\n",
         "3: loguniform of 'train.lr' needs lo > 0, got 0; use uniform for ranges reaching 0 or below"},
        {"random: {n: 2, keys: {lora.r: {uniform: [4.2, 4.8]}}}\n",
         "3: uniform of 'lora.r' (an integer key) holds no integer: widen [4.2, 4.8]"},
        {"random: {n: 2, keys: {train.lr: {normal: [0, 1]}}}\n",
         "3: unknown key 'normal' in train.lr (valid: uniform, loguniform)"},
        {"grid: {output.dir: [a, b]}\n",
         "3: 'output.dir' is set by the sweep for each run (<output.dir>/<run name>, <output.dir>/cache); vary another key"},
        {"grid: {train.lr: []}\n",
         "3: 'train.lr' must be a non-empty list of values (e.g. train.lr: [1.0e-4, 2.0e-4]), got a list"},
        {"grid: {train.lr: [1]}\nrandom: {n: 2, keys: {train.lr: [2]}}\n",
         "4: 'train.lr' is in both grid (line 3) and random: vary it in one of them"},
        {"random: {n: 0, keys: {train.lr: [2]}}\n", "3: random.n must be a whole number in [1, 100000], got 0"},
        {"grids: {train.lr: [1]}\n", "3: unknown key 'grids' in the sweep file (did you mean 'grid'?)"},
    };
    char *tmp = test_tmpdir();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[1024], expected[1024];
        snprintf(text, sizeof text, "base: b.yaml\noutput: {dir: o}\n%s", cases[i].body);
        char *path = write_in(tmp, "bad.yaml", text);
        qlt_sweep sw;
        cr_assert_eq(qlt_sweep_load(&sw, path), -1, "accepted: %s", cases[i].body);
        snprintf(expected, sizeof expected, "%s:%s", path, cases[i].expected);
        cr_expect_str_eq(qlt_error(), expected);
        cr_expect_null(strchr(qlt_error(), '\n'), "one line");
        qlt_sweep_free(&sw);
        free(path);
    }
    char *path = write_in(tmp, "nobase.yaml", "output: {dir: o}\ngrid: {train.lr: [1]}\n");
    qlt_sweep sw;
    cr_assert_eq(qlt_sweep_load(&sw, path), -1);
    cr_expect(strstr(qlt_error(), "nobase.yaml: no 'base'"), "%s", qlt_error());
    qlt_sweep_free(&sw);
    free(path);
    free(tmp);
}

/* A line of --dry-run: the name in 40 columns, the values, the state. */
static const char *dry_line(const char *name, const char *values, const char *state) {
    static char line[512];
    snprintf(line, sizeof line, "%-40s %s  -> %s\n", name, values, state);
    return line;
}

/* ---- through the binary ----------------------------------------------------------------------------------- */

/* tmp/train.jsonl, tmp/eval.jsonl (token ids < 512, the fixture's vocabulary) and tmp/base.yaml: tiny-qwen3 on the
 * CPU, 4 steps, a checkpoint at step 2, eval every 2 steps. */
static void write_base(const char *tmp) {
    for (int file = 0; file < 2; file++) {
        char *path = qlt_path_join(tmp, file ? "eval.jsonl" : "train.jsonl");
        test_write_random_token_rows(path, file ? 778 : 777, file ? 4 : 16);
        free(path);
    }
    char *model = test_fixture_path("tiny-qwen3", NULL), text[2048];
    snprintf(text, sizeof text,
             "model: {path: %s, quant: none}\n"
             "lora: {r: 4, alpha: 8}\n"
             "data: {train: [train.jsonl], eval: [eval.jsonl], format: tokens, seq_len: 24}\n"
             "train: {device: cpu, threads: 1, micro_batch: 2, max_steps: 4, lr: 1.0e-3, log_every: 1000, "
             "eval_every: 2}\n"
             "output: {dir: runs/unused, save_every: 2}\n",
             model);
    free(model);
    free(write_in(tmp, "base.yaml", text));
}

static ino_t inode_of(const char *path) {
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s is missing", path);
    return st.st_ino;
}

/* The rows of summary.csv after its header, in order: the run names. */
static int csv_rows(const char *text, char names[][64], char statuses[][16], double *best) {
    int n = 0;
    const char *line = strchr(text, '\n') + 1;
    while (*line) {
        const char *end = strchr(line, '\n');
        cr_assert(end);
        const char *q = line;
        cr_assert_eq(*q, '"', "a name with commas is quoted: %.60s", line);
        const char *close = strchr(q + 1, '"');
        snprintf(names[n], 64, "%.*s", (int)(close - q - 1), q + 1);
        /* run,train.lr,data.seq_len,status,reason,best_eval_loss,... */
        const char *field = close + 1;
        for (int k = 0; k < 2; k++) field = strchr(field + 1, ',');
        snprintf(statuses[n], 16, "%.*s", (int)(strchr(field + 1, ',') - field - 1), field + 1);
        field = strchr(strchr(field + 1, ',') + 1, ',');
        best[n] = field[1] == ',' ? INFINITY : atof(field + 1);
        n++;
        line = end + 1;
    }
    return n;
}

/* A 2x2 grid (train.lr x data.seq_len) stopped after two runs, the third left with a checkpoint at step 2 as an
 * interrupted run leaves it, then started again. */
Test(sweep, restart_skips_finished_runs_and_resumes_the_rest, .timeout = QLT_TEST_TIMEOUT_S) {
    char *tmp = test_tmpdir();
    write_base(tmp);
    free(write_in(tmp, "sweep.yaml",
                  "base: base.yaml\n"
                  "output: {dir: out}\n"
                  "grid: {train.lr: [1.0e-3, 3.0e-3], data.seq_len: [16, 24]}\n"));
    char *out = NULL;
    setenv("QLT_SWEEP_STOP_AFTER", "2", 1);
    int status = test_run_cli(tmp, "sweep sweep.yaml", &out);
    unsetenv("QLT_SWEEP_STOP_AFTER");
    cr_assert_eq(status, 3, "stopped early: exit status 3\n%s", out);
    cr_assert(strstr(out, "start   lr=0.001,seq_len=16 (1/4, new"), "%s", out);
    cr_assert(strstr(out, "done    lr=0.001,seq_len=24 (best eval loss"), "%s", out);
    cr_assert_null(strstr(out, "lr=0.003"), "no third run after the stop\n%s", out);
    free(out);
    char *partial = read_text(tmp, "out/summary.md");
    cr_assert(strstr(partial, "4 runs: 2 pending, 2 done"), "%s", partial);
    free(partial);
    /* the runs shared one cache: an entry per data file and seq_len, none in the run directories */
    char *cache = qlt_path_join(tmp, "out/cache"), *own_cache = qlt_path_join(tmp, "out/lr=0.001,seq_len=16/cache");
    int entries = 0;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '^dataset-.*\\.bin$'", cache);
    FILE *ls = popen(cmd, "r");
    cr_assert(ls && fscanf(ls, "%d", &entries) == 1);
    pclose(ls);
    cr_assert_eq(entries, 4, "train + eval at seq_len 16 and 24: %d cache entries", entries);
    cr_assert_not(qlt_dir_exists(own_cache), "a run kept its own cache");
    snprintf(cmd, sizeof cmd, "ls '%s'", cache);
    ls = popen(cmd, "r");
    char entry_names[4][64];
    ino_t inodes[4];
    for (int i = 0; i < 4; i++) {
        cr_assert(fscanf(ls, "%63s", entry_names[i]) == 1);
        char *p = qlt_path_join(cache, entry_names[i]);
        inodes[i] = inode_of(p);
        free(p);
    }
    pclose(ls);

    /* the third run as an interruption leaves it: checkpoint-2 and its first metrics, no final/ */
    char args[2048];
    snprintf(args, sizeof args,
             "train --config base.yaml --set train.lr=3.0e-3 --set data.seq_len=16 --set output.dir=scratch "
             "--set data.cache=false && mkdir -p 'out/lr=0.003,seq_len=16' && "
             "cp -r scratch/checkpoint-2 scratch/metrics.jsonl 'out/lr=0.003,seq_len=16/'");
    cr_assert_eq(test_run_cli(tmp, args, &out), 0, "%s", out);
    free(out);

    cr_assert_eq(test_run_cli(tmp, "sweep sweep.yaml --dry-run", &out), 0, "%s", out);
    cr_assert(strstr(out, dry_line("lr=0.001,seq_len=16", "train.lr=1.0e-3 data.seq_len=16", "finished (skipped)")),
              "%s", out);
    cr_assert(strstr(out, dry_line("lr=0.003,seq_len=16", "train.lr=3.0e-3 data.seq_len=16", "resumes from checkpoint-2")),
              "%s", out);
    cr_assert(strstr(out, dry_line("lr=0.003,seq_len=24", "train.lr=3.0e-3 data.seq_len=24", "new")), "%s", out);
    free(out);

    status = test_run_cli(tmp, "sweep sweep.yaml", &out);
    cr_assert_eq(status, 0, "%s", out);
    cr_assert(strstr(out, "skipped lr=0.001,seq_len=16\n"), "%s", out);
    cr_assert(strstr(out, "skipped lr=0.001,seq_len=24\n"), "%s", out);
    cr_assert(strstr(out, "start   lr=0.003,seq_len=16 (3/4, resumes from checkpoint-2"), "%s", out);
    cr_assert(strstr(out, "qlora-train: resumed from out/lr=0.003,seq_len=16/checkpoint-2 at step 2"), "%s", out);
    cr_assert(strstr(out, "done    lr=0.003,seq_len=24"), "%s", out);
    free(out);
    /* no re-tokenizing: the same four cache files (a rebuilt entry is a new file renamed over the old one) */
    for (int i = 0; i < 4; i++) {
        char *p = qlt_path_join(cache, entry_names[i]);
        cr_assert_eq(inode_of(p), inodes[i], "%s was written again", entry_names[i]);
        free(p);
    }
    /* the resumed run ends as the straight scratch run did */
    char *scratch = read_text(tmp, "scratch/metrics.jsonl"), *resumed = read_text(tmp, "out/lr=0.003,seq_len=16/metrics.jsonl");
    const char *s4 = strstr(scratch, "{\"step\": 4, \"eval_loss\""), *r4 = strstr(resumed, "{\"step\": 4, \"eval_loss\"");
    cr_assert(s4 && r4, "%s", resumed);
    cr_assert_eq(strcspn(s4, "\n"), strcspn(r4, "\n"));
    cr_assert_eq(strncmp(s4, r4, strcspn(s4, "\n")), 0, "resumed: %.80s\nstraight: %.80s", r4, s4);
    free(scratch);
    free(resumed);

    char *csv = read_text(tmp, "out/summary.csv"), *md = read_text(tmp, "out/summary.md");
    cr_assert(!strncmp(csv, "run,train.lr,data.seq_len,status,reason,best_eval_loss,best_step,final_eval_loss,"
                            "final_train_loss,tokens_per_s,peak_bytes,wall_s\n", 120), "%s", csv);
    char names[8][64], statuses[8][16];
    double best[8];
    cr_assert_eq(csv_rows(csv, names, statuses, best), 4, "%s", csv);
    int skipped = 0, done = 0;
    for (int i = 0; i < 4; i++) {
        skipped += !strcmp(statuses[i], "skipped");
        done += !strcmp(statuses[i], "done");
        cr_assert(isfinite(best[i]), "row %d has no best eval loss:\n%s", i, csv);
        if (i) cr_assert_leq(best[i - 1], best[i], "not sorted by best eval loss:\n%s", csv);
    }
    cr_assert_eq(skipped, 2, "%s", csv);
    cr_assert_eq(done, 2, "%s", csv);
    cr_assert(strstr(md, "4 runs: 2 done, 2 skipped"), "%s", md);
    cr_assert(strstr(md, "| run | train.lr | data.seq_len | status | best eval loss | at step | final eval loss | "
                         "final train loss | tokens/s | peak memory | wall time |"), "%s", md);
    cr_assert(strstr(md, "| lr=0.001,seq_len=16 | 1.0e-3 | 16 | skipped | "), "%s", md);
    cr_assert(strstr(md, " MiB | "), "peak memory from the runs' peak_bytes:\n%s", md);
    free(csv);
    free(md);
    char *run_config = read_text(tmp, "out/lr=0.003,seq_len=24/run_config.json");
    cr_assert(strstr(run_config, "\"lr\":\t0.003"), "%s", run_config);
    cr_assert(strstr(run_config, "\"seq_len\":\t24"), "%s", run_config);
    free(run_config);
    free(cache);
    free(own_cache);
    free(tmp);
}

Test(sweep, a_failing_run_does_not_stop_the_sweep, .timeout = QLT_TEST_TIMEOUT_S) {
    char *tmp = test_tmpdir();
    write_base(tmp);
    free(write_in(tmp, "sweep.yaml", "base: base.yaml\noutput: {dir: out}\ngrid: {lora.r: [2, 0, 3]}\n"));
    char *out = NULL;
    int status = test_run_cli(tmp, "sweep sweep.yaml", &out);
    cr_assert_eq(status, 1, "a failed run: exit status 1\n%s", out);
    cr_assert(strstr(out, "failed  r=0: --set lora.r=0: must be >= 1\n"), "%s", out);
    cr_assert(strstr(out, "done    r=3"), "the run after the failed one ran\n%s", out);
    free(out);
    char *csv = read_text(tmp, "out/summary.csv"), *log = read_text(tmp, "out/r=0/train.log");
    cr_assert(strstr(csv, "\nr=0,0,failed,--set lora.r=0: must be >= 1,,,,,,,"), "%s", csv);
    const char *last = strrchr(csv, '\n');
    while (last > csv && last[-1] != '\n') last--;
    cr_assert(!strncmp(last, "r=0,", 4), "the run without an eval loss comes last:\n%s", csv);
    cr_assert(strstr(log, "qlora-train: error: --set lora.r=0: must be >= 1"), "the log holds the run's output:\n%s", log);
    free(csv);
    free(log);
    free(tmp);
}

Test(sweep, dry_run_help_and_errors) {
    char *tmp = test_tmpdir();
    write_base(tmp);
    free(write_in(tmp, "sweep.yaml",
                  "base: base.yaml\noutput: {dir: out}\ngrid: {train.lr: [1.0e-3]}\n"
                  "random: {n: 2, seed: 3, keys: {lora.r: {uniform: [0, 0]}}}\n"));
    char *out = NULL;
    cr_assert_eq(test_run_cli(tmp, "sweep sweep.yaml --dry-run", &out), 0, "%s", out);
    cr_assert(strstr(out, "sweep sweep.yaml: 2 runs from base.yaml into out/\n"), "%s", out);
    cr_assert(strstr(out, dry_line("lr=0.001", "train.lr=1.0e-3", "new")), "%s", out);
    cr_assert(strstr(out, dry_line("r=0", "lora.r=0", "would fail: --set lora.r=0: must be >= 1")), "%s", out);
    char *out_dir = qlt_path_join(tmp, "out");
    cr_assert_not(qlt_dir_exists(out_dir), "a dry run writes nothing");
    free(out_dir);
    free(out);
    cr_assert_eq(test_run_cli(tmp, "sweep --help", &out), 0);
    cr_assert(strstr(out, "usage: qlora-train sweep SWEEP.yaml [--gpus 0,1,...] [--dry-run]"), "%s", out);
    cr_assert(strstr(out, "--gpus 0,1,...") && strstr(out, "--dry-run ") && strstr(out, "--help, -h "), "%s", out);
    free(out);
    cr_assert_eq(test_run_cli(tmp, "sweep sweep.yaml --gpus 0,x", &out), 1);
    cr_assert_str_eq(out, "qlora-train: error: --gpus 0,x: expected GPU numbers separated by commas, e.g. --gpus 0,1\n");
    free(out);
    free(write_in(tmp, "nobase.yaml", "base: missing.yaml\noutput: {dir: out}\ngrid: {train.lr: [1.0e-3]}\n"));
    cr_assert_eq(test_run_cli(tmp, "sweep nobase.yaml", &out), 1);
    cr_assert(strstr(out, "qlora-train: error: nobase.yaml: base: missing.yaml: cannot read"), "%s", out);
    cr_assert_eq(strchr(out, '\n') - out + 1, (long)strlen(out), "one line: %s", out);
    free(out);
    free(tmp);
}

/* --gpus 0,1: two runs at a time, each with its GPU in CUDA_VISIBLE_DEVICES (the runs here train on the CPU, which
 * ignores it: the scheduler is what is tested). */
Test(sweep, gpus_run_side_by_side, .timeout = QLT_TEST_TIMEOUT_S) {
    char *tmp = test_tmpdir();
    write_base(tmp);
    free(write_in(tmp, "sweep.yaml", "base: base.yaml\noutput: {dir: out}\ngrid: {lora.r: [2, 3, 4]}\n"));
    char *out = NULL;
    cr_assert_eq(test_run_cli(tmp, "sweep sweep.yaml --gpus 0,1", &out), 0, "%s", out);
    const char *a = strstr(out, "start   r=2 (1/3, new, GPU 0;"), *b = strstr(out, "start   r=3 (2/3, new, GPU 1;");
    const char *first_done = strstr(out, "done    ");
    cr_assert(a && b && first_done, "%s", out);
    cr_assert(a < first_done && b < first_done, "both GPUs get a run before any run ends:\n%s", out);
    cr_assert_null(strstr(out, "qlora-train: cpu backend"), "side by side, the runs' output goes to their logs only:\n%s",
                   out);
    const char *c = strstr(out, "start   r=4 (3/3, new, GPU ");
    cr_assert(c && c > first_done, "the third run waits for a free GPU:\n%s", out);
    free(out);
    char *log2 = read_text(tmp, "out/r=2/train.log"), *log3 = read_text(tmp, "out/r=3/train.log");
    cr_assert(strstr(log2, "$ CUDA_VISIBLE_DEVICES=0 /proc/self/exe train --config base.yaml --set lora.r=2 "
                           "--set output.dir=out/r=2 --set data.cache_dir=out/cache --resume auto\n"), "%s", log2);
    cr_assert(strstr(log3, "$ CUDA_VISIBLE_DEVICES=1 "), "%s", log3);
    cr_assert(strstr(log3, "qlora-train: adapter written to out/r=3/final"), "%s", log3);
    free(log2);
    free(log3);
    free(tmp);
}
