/* test_faults.c: what a run does when things go wrong (docs/RELIABILITY.md): a NaN gradient (the step is
 * skipped on the device, bit for bit; train.max_bad_steps in a row stop the run with a finite checkpoint; a
 * non-finite state is never saved), SIGKILL at random moments and inside a checkpoint save (--resume auto
 * always continues, and the final adapter is byte-identical to an uninterrupted run's), a disk that fills or
 * turns read-only (a one-line error, the earlier checkpoint intact), and a device error in the middle of a
 * step (recoverable: the last good state saved; sticky: the last checkpoint kept). CPU path; the faults come
 * from the test hooks of src/common/env.h and from small tmpfs mounts (setrlimit where mounting is refused). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "config/config.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_verify.h"
#include "train/trainer.h"

/* A directory with train.jsonl (16 rows of 24 random token ids) and run.yaml: a small tiny-qwen3 run over them,
 * one thread (the same bits every time), checkpoints every step; output.dir and max_steps set per use. */
typedef struct fault_files {
    char *tmp, *train, *config;
} fault_files;

static void files_setup(fault_files *f) {
    f->tmp = test_tmpdir();
    f->train = qlt_path_join(f->tmp, "train.jsonl");
    f->config = qlt_path_join(f->tmp, "run.yaml");
    test_write_random_token_rows(f->train, 12345, 16);
    test_write_cpu_run_config(f->config, f->train, "  log_every: 1\noutput:\n  save_every: 1\n");
}

static void files_free(fault_files *f) {
    qlt_remove_tree(f->tmp);
    free(f->tmp);
    free(f->train);
    free(f->config);
}

static char *fmt(const char *format, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *format, ...) {
    char *s = NULL;
    va_list ap;
    va_start(ap, format);
    if (vasprintf(&s, format, ap) < 0) abort();
    va_end(ap);
    return s;
}

/* `train` of run.yaml for steps steps into out, with extra arguments; the exit status (killed: 128 + 9 as the shell
 * says it, or 128), its output
 * into *said (heap) when not NULL. */
static int train(const fault_files *f, const char *out, int steps, const char *extra, char **said) {
    char *args = fmt("train --config %s --set train.max_steps=%d --set output.dir=%s %s", f->config, steps, out,
                     extra ? extra : "");
    char *output = NULL;
    int rc = test_run_cli(NULL, args, &output);
    free(args);
    if (said) *said = output;
    else free(output);
    return rc;
}

static char *read_bytes(const char *dir, const char *file, size_t *len) {
    char *path = qlt_path_join(dir, file), *bytes = NULL;
    cr_assert_eq(qlt_read_file(path, &bytes, len), 0, "%s", qlt_error());
    free(path);
    return bytes;
}

/* out/final/adapter_model.safetensors is byte for byte the reference run's. */
static void expect_same_final(const char *reference, const char *out) {
    char *a_dir = qlt_path_join(reference, "final"), *b_dir = qlt_path_join(out, "final");
    size_t len_a, len_b;
    char *a = read_bytes(a_dir, "adapter_model.safetensors", &len_a);
    char *b = read_bytes(b_dir, "adapter_model.safetensors", &len_b);
    cr_assert_eq(len_a, len_b, "final adapters of %zu and %zu bytes", len_a, len_b);
    cr_expect(memcmp(a, b, len_a) == 0, "%s/final/adapter_model.safetensors differs from the uninterrupted run's",
              out);
    free(a);
    free(b);
    free(a_dir);
    free(b_dir);
}

/* The latest complete checkpoint of out is whole (every file of trainer_state.json's list, sizes and CRC-32s)
 * and holds step want (-1: any); returns its step. */
static long long expect_latest_whole(const char *out, long long want) {
    char *latest = qlt_checkpoint_find_latest(out);
    if (!latest) {
        cr_expect_eq(want, -1, "no complete checkpoint in %s, expected checkpoint-%lld", out, want);
        return -1;
    }
    long long step = atoll(strrchr(latest, '-') + 1);
    if (want >= 0) cr_expect_eq(step, want, "latest checkpoint %s, expected checkpoint-%lld", latest, want);
    char *text = read_bytes(latest, "trainer_state.json", NULL);
    cJSON *s = cJSON_Parse(text);
    cr_assert(cJSON_IsObject(s), "%s/trainer_state.json is not JSON", latest);
    cr_expect_eq(qlt_ckpt_files_verify(latest, cJSON_GetObjectItemCaseSensitive(s, "files")), 0, "%s", qlt_error());
    cJSON_Delete(s);
    free(text);
    free(latest);
    return step;
}

/* A number of out/<dir>/trainer_state.json. */
static double state_number(const char *out, const char *dir, const char *key) {
    char *d = qlt_path_join(out, dir);
    char *text = read_bytes(d, "trainer_state.json", NULL);
    cJSON *s = cJSON_Parse(text);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    cr_assert(cJSON_IsNumber(v), "%s/trainer_state.json has no number %s", d, key);
    double value = v->valuedouble;
    cJSON_Delete(s);
    free(text);
    free(d);
    return value;
}

/* Lines of text that start with "qlora-train: error:". */
static int error_lines(const char *text) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, "qlora-train: error:")); p++) n += p == text || p[-1] == '\n';
    return n;
}

/* ---- numerical faults ---- */

typedef struct host_state {
    float *p, *m, *v;
} host_state;

static host_state download_state(const qlt_trainer *t) {
    size_t bytes = sizeof(float) * (size_t)t->lora.n_params;
    host_state s = {qlt_xmalloc(bytes), qlt_xmalloc(bytes), qlt_xmalloc(bytes)};
    t->be->download(t->be, s.p, t->lora.params, bytes);
    t->be->download(t->be, s.m, t->lora.m, bytes);
    t->be->download(t->be, s.v, t->lora.v, bytes);
    return s;
}

static void free_state(host_state *s) {
    free(s->p);
    free(s->m);
    free(s->v);
}

static void load_config(qlt_config *cfg, const fault_files *f, const char *out, int steps) {
    qlt_config_defaults(cfg);
    cr_assert_eq(qlt_config_load_file(cfg, f->config), 0, "%s", qlt_error());
    char *a = fmt("output.dir=%s", out), *b = fmt("train.max_steps=%d", steps);
    cr_assert_eq(qlt_config_set(cfg, a), 0, "%s", qlt_error());
    cr_assert_eq(qlt_config_set(cfg, b), 0, "%s", qlt_error());
    cr_assert_eq(qlt_config_validate(cfg), 0, "%s", qlt_error());
    free(a);
    free(b);
}

/* QLT_TEST_NAN_AT_STEP=3: step 3's gradient holds a NaN. The step is skipped on the device: the adapter and both
 * Adam moments keep every bit, Adam's step count stays 2 (step 4 is Adam's step 3, with its bias corrections),
 * skipped_steps counts it; the steps around it update as usual. */
Test(faults, nan_step_is_skipped_bit_exactly) {
    fault_files f;
    files_setup(&f);
    char *out = qlt_path_join(f.tmp, "out");
    qlt_config cfg;
    load_config(&cfg, &f, out, 6);
    setenv("QLT_TEST_NAN_AT_STEP", "3", 1);
    qlt_trainer t;
    cr_assert_eq(qlt_trainer_init(&t, &cfg, QLT_TRAINER_TRAIN), 0, "%s", qlt_error());
    unsetenv("QLT_TEST_NAN_AT_STEP");
    qlt_step_metrics m;
    host_state before = download_state(&t);
    for (int s = 1; s <= 2; s++) {
        cr_assert_eq(qlt_trainer_step(&t, &m), 0, "%s", qlt_error());
        cr_expect(!m.skipped && m.skipped_steps == 0 && isfinite(m.grad_norm), "step %d", s);
    }
    host_state good = download_state(&t);
    size_t bytes = sizeof(float) * (size_t)t.lora.n_params;
    cr_expect(memcmp(before.p, good.p, bytes) != 0, "two good steps moved the adapter");

    cr_assert_eq(qlt_trainer_step(&t, &m), 0, "%s", qlt_error());
    cr_expect_eq(m.step, 3);
    cr_expect(m.skipped, "step 3 (a NaN gradient) must be skipped");
    cr_expect_eq(m.skipped_steps, 1);
    cr_expect_eq(m.bad_streak, 1);
    cr_expect(!isfinite(m.grad_norm), "step 3's gradient norm %g", m.grad_norm);
    host_state after = download_state(&t);
    cr_expect(memcmp(good.p, after.p, bytes) == 0, "the skipped step changed the adapter");
    cr_expect(memcmp(good.m, after.m, bytes) == 0, "the skipped step changed exp_avg");
    cr_expect(memcmp(good.v, after.v, bytes) == 0, "the skipped step changed exp_avg_sq");
    qlt_optim_scalars sc;
    t.be->download(t.be, &sc, t.scalars, sizeof sc);
    cr_expect_eq(sc.adam_step, 2, "Adam's step count after a skipped step: %lld", (long long)sc.adam_step);
    cr_expect_eq(t.step, 3, "the data step advances");

    cr_assert_eq(qlt_trainer_step(&t, &m), 0, "%s", qlt_error());
    cr_expect(!m.skipped && m.skipped_steps == 1 && m.bad_streak == 0, "step 4 is good again");
    host_state next = download_state(&t);
    cr_expect(memcmp(after.p, next.p, bytes) != 0, "step 4 updates the adapter");
    t.be->download(t.be, &sc, t.scalars, sizeof sc);
    cr_expect_eq(sc.adam_step, 3);
    cr_expect_eq(sc.bias_correction1, (float)(1.0 - pow((double)cfg.train.betas[0], 3.0)));
    cr_expect_eq(sc.bias_correction2, (float)(1.0 - pow((double)cfg.train.betas[1], 3.0)));
    for (int64_t i = 0; i < t.lora.n_params; i++)
        cr_assert(isfinite(next.p[i]) && isfinite(next.m[i]) && isfinite(next.v[i]), "element %lld", (long long)i);
    free_state(&before);
    free_state(&good);
    free_state(&after);
    free_state(&next);
    qlt_trainer_free(&t);
    qlt_config_free(&cfg);
    free(out);
    files_free(&f);
}

/* NaN from step 3 on with train.max_bad_steps 3: steps 3-5 are skipped (metrics.jsonl: grad_norm null,
 * skipped_steps 1..3; the progress lines say "skipped N"), the run stops at step 5 with one error line and a
 * non-zero exit, and checkpoint-5 holds step 2's adapter (the bytes of checkpoint-2's), finite, with adam_step 2;
 * --resume auto without the fault runs to the end. */
Test(faults, max_bad_steps_stops_with_the_last_good_state, .timeout = QLT_TEST_TIMEOUT_S) {
    fault_files f;
    files_setup(&f);
    char *out = qlt_path_join(f.tmp, "out"), *said = NULL;
    setenv("QLT_TEST_NAN_AT_STEP", "3-100", 1);
    int rc = train(&f, out, 10, "--set train.max_bad_steps=3", &said);
    unsetenv("QLT_TEST_NAN_AT_STEP");
    cr_expect_neq(rc, 0, "a run stopped by max_bad_steps exits non-zero: %s", said);
    cr_expect_eq(error_lines(said), 1, "%s", said);
    cr_expect(strstr(said, "step 5: 3 steps in a row had a non-finite loss or gradient norm") &&
                  strstr(said, "checkpoint-5 holds the adapter and optimizer state of step 2"),
              "%s", said);
    cr_expect(strstr(said, "skipped 3"), "the progress line shows the skipped steps: %s", said);
    expect_latest_whole(out, 5);
    cr_expect_eq(state_number(out, "checkpoint-5", "adam_step"), 2);
    cr_expect_eq(state_number(out, "checkpoint-5", "skipped_steps"), 3);
    char *c2 = qlt_path_join(out, "checkpoint-2"), *c5 = qlt_path_join(out, "checkpoint-5");
    size_t len2, len5;
    char *a2 = read_bytes(c2, "adapter_model.safetensors", &len2), *a5 = read_bytes(c5, "adapter_model.safetensors", &len5);
    cr_expect(len2 == len5 && memcmp(a2, a5, len2) == 0, "checkpoint-5's adapter is not step 2's");
    char *metrics = read_bytes(out, "metrics.jsonl", NULL);
    cr_expect(strstr(metrics, "{\"step\": 3, ") && strstr(metrics, "\"grad_norm\": null"), "%s", metrics);
    cr_expect(strstr(metrics, "\"skipped_steps\": 3}"), "%s", metrics);
    char *csv = read_bytes(out, "metrics.csv", NULL);
    cr_expect(strstr(csv, ",skipped_steps\n"), "metrics.csv has a skipped_steps column: %s", csv);
    free(said);
    rc = train(&f, out, 10, "--resume auto", &said);
    cr_expect_eq(rc, 0, "%s", said);
    cr_expect(strstr(said, "resumed from") && strstr(said, "checkpoint-5"), "%s", said);
    free(said);
    free(metrics);
    free(csv);
    free(a2);
    free(a5);
    free(c2);
    free(c5);
    free(out);
    files_free(&f);
}

/* A state holding a NaN is never saved: a checkpoint whose exp_avg holds one is refused in one line naming it,
 * nothing of it is written, the latest checkpoint stays the one before; final/ refuses a NaN adapter. */
Test(faults, non_finite_state_is_never_saved) {
    fault_files f;
    files_setup(&f);
    char *out = qlt_path_join(f.tmp, "out");
    qlt_config cfg;
    load_config(&cfg, &f, out, 4);
    qlt_trainer t;
    cr_assert_eq(qlt_trainer_init(&t, &cfg, QLT_TRAINER_TRAIN), 0, "%s", qlt_error());
    cr_assert_eq(qlt_mkdirs(out), 0);
    qlt_step_metrics m;
    cr_assert_eq(qlt_trainer_step(&t, &m), 0, "%s", qlt_error());
    char *c1 = qlt_path_join(out, "checkpoint-1"), *c2 = qlt_path_join(out, "checkpoint-2");
    char *final_dir = qlt_path_join(out, "final");
    cr_assert_eq(qlt_checkpoint_save(&t, c1), 0, "%s", qlt_error());
    cr_assert_eq(qlt_trainer_step(&t, &m), 0, "%s", qlt_error());
    float bad = INFINITY;
    t.be->upload(t.be, t.lora.m + 7, &bad, sizeof bad);
    cr_expect_neq(qlt_checkpoint_save(&t, c2), 0, "a checkpoint with an infinite exp_avg was written");
    cr_expect(strstr(qlt_error(), c2) && strstr(qlt_error(), "1 exp_avg") && strstr(qlt_error(), "NaN or infinite") &&
                  strstr(qlt_error(), "checkpoint-1"),
              "%s", qlt_error());
    cr_expect(!strchr(qlt_error(), '\n'), "one line: %s", qlt_error());
    cr_expect(!qlt_dir_exists(c2), "%s was written", c2);
    expect_latest_whole(out, 1);
    bad = NAN;
    t.be->upload(t.be, t.lora.params + 3, &bad, sizeof bad);
    cr_expect_neq(qlt_adapter_save(&t, final_dir), 0, "a NaN adapter was written to final/");
    cr_expect(strstr(qlt_error(), "1 adapter values"), "%s", qlt_error());
    cr_expect(!qlt_dir_exists(final_dir));
    qlt_trainer_free(&t);
    qlt_config_free(&cfg);
    free(c1);
    free(c2);
    free(final_dir);
    free(out);
    files_free(&f);
}

/* ---- kills ---- */

/* 1 when out holds a temporary save (a name with ".tmp-"): the kill landed inside a save. */
static int has_temporary(const char *out) {
    DIR *d = opendir(out);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp-")) found = 1;
    closedir(d);
    return found;
}

/* Starts `qlora-train train` with argv's arguments, its output into log; with fsize > 0 the child may write files
 * of at most fsize bytes (RLIMIT_FSIZE, SIGXFSZ ignored: a longer write fails with EFBIG). */
static pid_t spawn_train(const fault_files *f, const char *out, int steps, const char *log, long fsize) {
    char *set_out = fmt("output.dir=%s", out), *set_steps = fmt("train.max_steps=%d", steps);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork failed");
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        /* nothing else of the test process (Criterion's pipes to its runner) goes to a child that is killed */
        for (int other = 3; other < 1024; other++) close(other);
        if (fsize > 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit lim = {(rlim_t)fsize, (rlim_t)fsize};
            if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(125);
        }
        char *argv[] = {"qlora-train", "train", "--config", f->config, "--set", set_steps, "--set", set_out,
                        "--resume", "auto", NULL};
        execv(QLT_BINARY, argv);
        _exit(127);
    }
    free(set_out);
    free(set_steps);
    return pid;
}

/* Kills `train --resume auto` 24 times: 16 times after a random delay (anywhere from its start-up to its last
 * step: loading, mid-step, mid-save, pruning), 8 times inside a checkpoint save through QLT_TEST_KILL_IN_SAVE
 * (before the adapter, before the optimizer state, before trainer_state.json, before the rename). After each kill
 * the latest complete checkpoint is whole; a run that ends by itself exits 0; the last --resume auto finishes and
 * final/ is byte-identical to an uninterrupted run's. */
Test(faults, kills_at_any_moment_resume_exactly, .timeout = QLT_TEST_TIMEOUT_S) {
    fault_files f;
    files_setup(&f);
    const int steps = 400; /* more than 24 kills can get through: a random one lets up to ~20 steps be saved */
    char *straight = qlt_path_join(f.tmp, "straight"), *out = qlt_path_join(f.tmp, "killed");
    char *log = qlt_path_join(f.tmp, "killed.log"), *said = NULL;
    cr_assert_eq(train(&f, straight, steps, "--set output.keep_last=3", &said), 0, "%s", said);
    free(said);
    /* run.yaml's keep_last is the default (all): the killed run prunes as the straight one does */
    char *yaml = read_bytes(f.tmp, "run.yaml", NULL), *with_keep = fmt("%s  keep_last: 3\n", yaml);
    test_write_text(f.config, with_keep);
    free(yaml);
    free(with_keep);

    static const char *const phases[] = {"adapter", "optimizer", "state", "rename"};
    unsigned short rng[3] = {2026, 11, 28};
    int kills = 0, in_save = 0, finished = 0, random_in_save = 0, before_first = 0;
    for (int i = 0; i < 24 && !finished; i++) {
        int save_kill = i % 3 == 2;
        if (save_kill) setenv("QLT_TEST_KILL_IN_SAVE", phases[in_save % 4], 1);
        pid_t pid = spawn_train(&f, out, steps, log, 0);
        unsetenv("QLT_TEST_KILL_IN_SAVE");
        int status = 0;
        if (save_kill) {
            cr_assert_eq(waitpid(pid, &status, 0), pid);
        } else {
            struct timespec delay = {0, (long)(20 + 330 * erand48(rng)) * 1000 * 1000};
            nanosleep(&delay, NULL);
            if (waitpid(pid, &status, WNOHANG) == 0) {
                kill(pid, SIGKILL);
                cr_assert_eq(waitpid(pid, &status, 0), pid);
            }
        }
        char *text = read_bytes(f.tmp, "killed.log", NULL);
        if (WIFEXITED(status)) { /* it ran to the end before the kill */
            cr_assert_eq(WEXITSTATUS(status), 0, "run %d: exit %d: %s", i, WEXITSTATUS(status), text);
            finished = 1;
        } else {
            cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "run %d: %s", i, text);
            kills++;
            if (save_kill) {
                cr_expect(strstr(text, "QLT_TEST_KILL_IN_SAVE: killed at"), "run %d: %s", i, text);
                in_save++;
            } else {
                /* past start-up (which removes an earlier kill's leftovers), a temporary save is this run's */
                int started = strstr(text, "step ") != NULL;
                random_in_save += started && has_temporary(out);
                before_first += !started;
            }
        }
        free(text);
        expect_latest_whole(out, -1);
    }
    fprintf(stderr, "faults: %d kills (%d by the save hook; of the random ones %d inside a save, %d before a first "
            "step), latest checkpoint whole after each\n", kills, in_save, random_in_save, before_first);
    cr_expect_geq(kills, 20, "only %d kills landed before the run finished", kills);
    cr_expect_eq(in_save, 8);
    cr_assert_eq(train(&f, out, steps, "--resume auto", &said), 0, "%s", said);
    free(said);
    expect_same_final(straight, out);
    free(log);
    free(straight);
    free(out);
    files_free(&f);
}

/* ---- disk full and unwritable output ---- */

/* A tmpfs of size bytes at dir; 0 where mounting is not permitted (not root, or no CAP_SYS_ADMIN). */
static int mount_tmpfs(const char *dir, long size) {
    char *opts = fmt("size=%ld", size);
    int ok = mount("tmpfs", dir, "tmpfs", 0, opts) == 0;
    free(opts);
    return ok;
}

static void remount(const char *dir, unsigned long flags, long size) {
    char *opts = fmt("size=%ld", size);
    cr_assert_eq(mount("tmpfs", dir, "tmpfs", MS_REMOUNT | flags, opts), 0, "remount %s (%s): %s", dir, opts,
                 strerror(errno));
    free(opts);
}

/* Steps 1-3 of a 12-step run into out, then a kill at the save of step 4 (checkpoint-3 the latest). */
static void first_three_steps(const fault_files *f, const char *out) {
    setenv("QLT_TEST_KILL_IN_SAVE", "adapter:4", 1);
    char *said = NULL;
    int rc = train(f, out, 12, NULL, &said);
    unsetenv("QLT_TEST_KILL_IN_SAVE");
    cr_assert(rc == 128 || rc == 128 + SIGKILL, "the run was not killed at the save of step 4: %s", said);
    free(said);
    expect_latest_whole(out, 3);
}

/* The disk fills during a checkpoint: on a tmpfs left 64 KiB more than the run holds after step 3 (a checkpoint
 * takes about 120 KiB), or, where mounting is refused, with files limited to 60000 bytes (the optimizer state is
 * 78 KiB: EFBIG). The resumed run fails at the save of step 4 with one error line naming the checkpoint, the cause
 * and what to do, exits non-zero, leaves no part of checkpoint-4, and checkpoint-3 stays whole; with room again,
 * --resume auto finishes byte-identical to an uninterrupted run. */
Test(faults, disk_full_during_a_checkpoint, .timeout = QLT_TEST_TIMEOUT_S) {
    fault_files f;
    files_setup(&f);
    char *straight = qlt_path_join(f.tmp, "straight"), *mnt = qlt_path_join(f.tmp, "mnt");
    char *out = qlt_path_join(mnt, "run"), *log = qlt_path_join(f.tmp, "full.log"), *said = NULL;
    cr_assert_eq(train(&f, straight, 12, NULL, &said), 0, "%s", said);
    free(said);
    cr_assert_eq(qlt_mkdirs(mnt), 0);
    int mounted = mount_tmpfs(mnt, 16L << 20);
    first_three_steps(&f, out);
    int status;
    if (mounted) {
        struct statvfs st;
        cr_assert_eq(statvfs(mnt, &st), 0);
        long used = (long)((st.f_blocks - st.f_bfree) * st.f_frsize);
        remount(mnt, 0, used + (64L << 10));
        pid_t pid = spawn_train(&f, out, 12, log, 0);
        cr_assert_eq(waitpid(pid, &status, 0), pid);
    } else {
        pid_t pid = spawn_train(&f, out, 12, log, 60000);
        cr_assert_eq(waitpid(pid, &status, 0), pid);
    }
    char *text = read_bytes(f.tmp, "full.log", NULL);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) != 0, "a failed save must exit non-zero: %s", text);
    cr_expect_eq(error_lines(text), 1, "%s", text);
    char *c4 = qlt_path_join(out, "checkpoint-4");
    cr_expect(strstr(text, c4) && strstr(text, mounted ? "No space left on device" : "File too large") &&
                  strstr(text, "free space on it or make output.dir writable, then --resume auto") &&
                  strstr(text, "checkpoint-3"),
              "%s", text);
    cr_expect(!qlt_dir_exists(c4), "part of checkpoint-4 was left");
    expect_latest_whole(out, 3);
    if (mounted) remount(mnt, 0, 16L << 20);
    int rc = train(&f, out, 12, "--resume auto", &said);
    cr_expect_eq(rc, 0, "%s", said);
    cr_expect(strstr(said, "resumed from") && strstr(said, "checkpoint-3"), "%s", said);
    free(said);
    expect_same_final(straight, out);
    if (mounted) umount2(mnt, MNT_DETACH);
    free(text);
    free(c4);
    free(log);
    free(out);
    free(mnt);
    free(straight);
    files_free(&f);
}

/* output.dir turns read-only (a tmpfs remounted read-only: as root, file modes stop nothing): --resume auto fails
 * in one line naming the path, exits non-zero, checkpoint-3 stays whole; writable again, the run finishes
 * byte-identical to an uninterrupted run. Needs mount (root with CAP_SYS_ADMIN, as CI runs). */
Test(faults, read_only_output, .timeout = QLT_TEST_TIMEOUT_S) {
    fault_files f;
    files_setup(&f);
    char *straight = qlt_path_join(f.tmp, "straight"), *mnt = qlt_path_join(f.tmp, "mnt");
    char *out = qlt_path_join(mnt, "run"), *said = NULL;
    cr_assert_eq(qlt_mkdirs(mnt), 0);
    if (!mount_tmpfs(mnt, 16L << 20)) {
        files_free(&f);
        cr_skip_test("mounting a tmpfs is not permitted here (%s): read-only output needs it", strerror(errno));
    }
    cr_assert_eq(train(&f, straight, 12, NULL, &said), 0, "%s", said);
    free(said);
    first_three_steps(&f, out);
    remount(mnt, MS_RDONLY, 16L << 20);
    int rc = train(&f, out, 12, "--resume auto", &said);
    cr_expect_neq(rc, 0, "a read-only output.dir must fail: %s", said);
    cr_expect_eq(error_lines(said), 1, "%s", said);
    cr_expect(strstr(said, out) && strstr(said, "Read-only file system"), "%s", said);
    free(said);
    remount(mnt, 0, 16L << 20);
    expect_latest_whole(out, 3);
    rc = train(&f, out, 12, "--resume auto", &said);
    cr_expect_eq(rc, 0, "%s", said);
    free(said);
    expect_same_final(straight, out);
    umount2(mnt, MNT_DETACH);
    free(out);
    free(mnt);
    free(straight);
    files_free(&f);
}

/* ---- device errors ---- */

/* A recoverable device error (QLT_TEST_DEVICE_FAULT=step:5:recoverable, as a failed allocation) in the middle of
 * step 5 of a run saving every 2 steps: the optimizer ops of step 5 do nothing, the state after step 4 is saved
 * as checkpoint-4 (its adapter the bytes of an uninterrupted run's checkpoint-4), one error line says so, exit
 * non-zero; --resume auto finishes byte-identical to the uninterrupted run. */
Test(faults, recoverable_device_error_saves_the_last_good_step, .timeout = QLT_TEST_TIMEOUT_S) {
    fault_files f;
    files_setup(&f);
    char *straight = qlt_path_join(f.tmp, "straight"), *out = qlt_path_join(f.tmp, "out"), *said = NULL;
    cr_assert_eq(train(&f, straight, 8, NULL, &said), 0, "%s", said);
    free(said);
    setenv("QLT_TEST_DEVICE_FAULT", "step:5:recoverable", 1);
    int rc = train(&f, out, 8, "--set output.save_every=3", &said);
    unsetenv("QLT_TEST_DEVICE_FAULT");
    cr_expect(rc != 0 && rc < 128, "exit %d: %s", rc, said);
    cr_expect_eq(error_lines(said), 1, "%s", said);
    cr_expect(strstr(said, "step 5: cpu device error: injected recoverable fault") &&
                  strstr(said, "still readable") && strstr(said, "checkpoint-4 holds the adapter and optimizer state "
                                                                "after step 4"),
              "%s", said);
    free(said);
    expect_latest_whole(out, 4);
    char *a_dir = qlt_path_join(straight, "checkpoint-4"), *b_dir = qlt_path_join(out, "checkpoint-4");
    size_t len_a, len_b;
    char *a = read_bytes(a_dir, "adapter_model.safetensors", &len_a);
    char *b = read_bytes(b_dir, "adapter_model.safetensors", &len_b);
    cr_expect(len_a == len_b && memcmp(a, b, len_a) == 0, "checkpoint-4 is not the state after step 4");
    a = (free(a), read_bytes(a_dir, "optimizer.safetensors", &len_a));
    b = (free(b), read_bytes(b_dir, "optimizer.safetensors", &len_b));
    cr_expect(len_a == len_b && memcmp(a, b, len_a) == 0, "checkpoint-4's Adam moments are not step 4's");
    rc = train(&f, out, 8, "--set output.save_every=3 --resume auto", &said);
    cr_expect_eq(rc, 0, "%s", said);
    free(said);
    expect_same_final(straight, out);
    free(a);
    free(b);
    free(a_dir);
    free(b_dir);
    free(out);
    free(straight);
    files_free(&f);
}

/* A sticky device error (QLT_TEST_DEVICE_FAULT=step:5:sticky, as an illegal address) in step 5 of a run saving
 * every 3 steps: nothing is read back or saved, one error line says the device is unusable and names
 * checkpoint-3, kept whole; --resume auto finishes byte-identical to an uninterrupted run. */
Test(faults, sticky_device_error_keeps_the_last_checkpoint, .timeout = QLT_TEST_TIMEOUT_S) {
    fault_files f;
    files_setup(&f);
    char *straight = qlt_path_join(f.tmp, "straight"), *out = qlt_path_join(f.tmp, "out"), *said = NULL;
    cr_assert_eq(train(&f, straight, 8, NULL, &said), 0, "%s", said);
    free(said);
    setenv("QLT_TEST_DEVICE_FAULT", "step:5:sticky", 1);
    int rc = train(&f, out, 8, "--set output.save_every=3", &said);
    unsetenv("QLT_TEST_DEVICE_FAULT");
    cr_expect(rc != 0 && rc < 128, "exit %d: %s", rc, said);
    cr_expect_eq(error_lines(said), 1, "%s", said);
    char *c3 = qlt_path_join(out, "checkpoint-3");
    cr_expect(strstr(said, "step 5: cpu device error: injected sticky fault") && strstr(said, "unusable") &&
                  strstr(said, c3),
              "%s", said);
    free(said);
    expect_latest_whole(out, 3);
    rc = train(&f, out, 8, "--set output.save_every=3 --resume auto", &said);
    cr_expect_eq(rc, 0, "%s", said);
    free(said);
    expect_same_final(straight, out);
    free(c3);
    free(out);
    free(straight);
    files_free(&f);
}

/* Bad hook values are refused in one line naming the variable. */
Test(faults, bad_hook_values_are_refused) {
    fault_files f;
    files_setup(&f);
    char *out = qlt_path_join(f.tmp, "out"), *said = NULL;
    setenv("QLT_TEST_DEVICE_FAULT", "step:five:sticky", 1);
    cr_expect_neq(train(&f, out, 2, NULL, &said), 0);
    cr_expect(strstr(said, "QLT_TEST_DEVICE_FAULT=step:five:sticky: expected step:N:recoverable"), "%s", said);
    unsetenv("QLT_TEST_DEVICE_FAULT");
    free(said);
    setenv("QLT_TEST_NAN_AT_STEP", "4-2", 1);
    cr_expect_neq(train(&f, out, 2, NULL, &said), 0);
    cr_expect(strstr(said, "QLT_TEST_NAN_AT_STEP=4-2: expected"), "%s", said);
    unsetenv("QLT_TEST_NAN_AT_STEP");
    free(said);
    free(out);
    files_free(&f);
}
