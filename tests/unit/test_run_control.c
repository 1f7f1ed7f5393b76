/* test_run_control.c: how a run stops and what resume trusts (src/train/run_control.c, checkpoint_verify.c):
 * early stopping and best/ on an eval curve that turns up, SIGINT / SIGTERM sent to a running `qlora-train
 * train` (exit 130 / 143, a checkpoint, an exact resume), and the checkpoints resume refuses: a flipped byte,
 * a file of another size, another base model, another LoRA shape or tokenizer; leftover temporary saves. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "config/config.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/run_control.h"
#include "train/trainer.h"

/* A run directory with its data: train.jsonl (16 rows) and eval.jsonl (8 other rows) of 24 random token ids,
 * and run.yaml, a small tiny-qwen3 run over them (no output.dir: each use sets it). */
typedef struct run_files {
    char *tmp, *train, *eval, *config;
} run_files;

static void files_setup(run_files *f) {
    f->tmp = test_tmpdir();
    f->train = qlt_path_join(f->tmp, "train.jsonl");
    f->eval = qlt_path_join(f->tmp, "eval.jsonl");
    f->config = qlt_path_join(f->tmp, "run.yaml");
    test_write_random_token_rows(f->train, 12345, 16);
    test_write_random_token_rows(f->eval, 999, 8);
    test_write_cpu_run_config(f->config, f->train, "  log_every: 1000\n");
}

static void files_free(run_files *f) {
    qlt_remove_tree(f->tmp);
    free(f->tmp);
    free(f->train);
    free(f->eval);
    free(f->config);
}

static void set(qlt_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set(qlt_config *cfg, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cr_assert_eq(qlt_config_set(cfg, buf), 0, "--set %s: %s", buf, qlt_error());
}

/* run.yaml with output.dir = out. */
static void load_config(qlt_config *cfg, const run_files *f, const char *out) {
    qlt_config_defaults(cfg);
    cr_assert_eq(qlt_config_load_file(cfg, f->config), 0, "%s", qlt_error());
    set(cfg, "output.dir=%s", out);
}

static void validate(const qlt_config *cfg) { cr_assert_eq(qlt_config_validate(cfg), 0, "%s", qlt_error()); }

/* A whole run (resume: NULL, "auto" or a dir); returns qlt_trainer_run's result, *step_out the step it ended at. */
static int run(const qlt_config *cfg, const char *resume, int64_t *step_out) {
    qlt_trainer t;
    cr_assert_eq(qlt_trainer_init(&t, cfg, QLT_TRAINER_TRAIN), 0, "%s", qlt_error());
    qlt_error_clear();
    int rc = qlt_trainer_run(&t, resume);
    if (step_out) *step_out = t.step;
    qlt_trainer_free(&t);
    return rc;
}

/* A number of out/<dir>/trainer_state.json. */
static double state_number(const char *out, const char *dir, const char *key) {
    char *d = qlt_path_join(out, dir), *path = qlt_path_join(d, "trainer_state.json"), *text;
    cr_assert_eq(qlt_read_file(path, &text, NULL), 0, "%s", qlt_error());
    char needle[96];
    snprintf(needle, sizeof needle, "\"%s\":", key);
    char *p = strstr(text, needle);
    cr_assert(p, "%s has no %s", path, key);
    double v = strtod(p + strlen(needle), NULL);
    free(text);
    free(path);
    free(d);
    return v;
}

static int dir_in(const char *out, const char *name) {
    char *p = qlt_path_join(out, name);
    int exists = qlt_dir_exists(p);
    free(p);
    return exists;
}

/* The eval losses of metrics.jsonl in order, with their steps (at most cap). */
static int eval_curve(const char *out, int64_t *steps, double *losses, int cap) {
    char *path = qlt_path_join(out, "metrics.jsonl"), *text;
    cr_assert_eq(qlt_read_file(path, &text, NULL), 0);
    int n = 0;
    for (char *line = strstr(text, "\"eval_loss\""); line && n < cap; line = strstr(line + 1, "\"eval_loss\"")) {
        char *start = line;
        while (start > text && start[-1] != '\n') start--;
        long long step;
        cr_assert_eq(sscanf(start, "{\"step\": %lld,", &step), 1);
        steps[n] = step;
        losses[n] = strtod(line + strlen("\"eval_loss\": "), NULL);
        n++;
    }
    free(text);
    free(path);
    return n;
}

/* Eval data unlike the training rows and a high learning rate: the eval loss falls, then rises as the
 * adapter learns the training rows by heart. With patience 3, the run stops at the third eval in a row that
 * is not below the best, keeps best/ (the lowest eval loss) through keep_last 1, and says it is finished to
 * --resume auto. The stop step and best step are worked out here from metrics.jsonl's eval losses. */
Test(run_control, early_stopping_keeps_best) {
    run_files f;
    files_setup(&f);
    char *out = qlt_path_join(f.tmp, "run");
    qlt_config cfg;
    load_config(&cfg, &f, out);
    set(&cfg, "data.eval=%s", f.eval);
    set(&cfg, "lora.dropout=0");
    set(&cfg, "train.max_steps=60");
    set(&cfg, "train.eval_every=2");
    set(&cfg, "train.early_stopping_patience=3");
    set(&cfg, "output.save_best=true");
    set(&cfg, "output.save_every=1");
    set(&cfg, "output.keep_last=1");
    validate(&cfg);
    int64_t stopped;
    cr_assert_eq(run(&cfg, NULL, &stopped), 0, "%s", qlt_error());

    int64_t steps[64];
    double losses[64];
    int n = eval_curve(out, steps, losses, 64);
    double best = INFINITY;
    int64_t best_step = -1, expect_stop = -1;
    int bad = 0;
    for (int i = 0; i < n && expect_stop < 0; i++) {
        if (losses[i] < best) {
            best = losses[i];
            best_step = steps[i];
            bad = 0;
        } else if (++bad == 3) {
            expect_stop = steps[i];
        }
    }
    cr_assert(expect_stop > 0 && expect_stop < 60, "the eval curve never stops improving for 3 evals (%d evals)", n);
    cr_expect_eq(stopped, expect_stop, "stopped at step %lld, expected %lld", (long long)stopped, (long long)expect_stop);
    cr_expect_eq(steps[n - 1], expect_stop, "evaluated past the stop (last eval at step %lld)", (long long)steps[n - 1]);
    cr_expect(best_step > 2 && best_step < expect_stop, "best step %lld", (long long)best_step);
    /* best/: the full checkpoint of the best step, kept although keep_last is 1 */
    cr_assert(dir_in(out, "best"), "no best/");
    cr_expect_eq(state_number(out, "best", "step"), (double)best_step);
    cr_expect_eq(state_number(out, "best", "best_step"), (double)best_step);
    cr_expect(fabs(state_number(out, "best", "best_eval_loss") - best) <= 1e-8 * best);
    char *best_opt = qlt_path_join(out, "best/optimizer.safetensors");
    cr_expect(qlt_file_exists(best_opt), "best/ lacks the optimizer state");
    free(best_opt);
    /* the stop's checkpoint (the only one keep_last leaves) records the count; final/ is written */
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%lld", (long long)expect_stop);
    cr_expect(dir_in(out, name), "no %s", name);
    snprintf(name, sizeof name, "checkpoint-%lld", (long long)expect_stop - 1);
    cr_expect(!dir_in(out, name), "keep_last 1 left %s", name);
    snprintf(name, sizeof name, "checkpoint-%lld", (long long)expect_stop);
    cr_expect_eq(state_number(out, name, "evals_without_improvement"), 3);
    cr_expect_eq(state_number(out, name, "best_step"), (double)best_step);
    cr_assert(dir_in(out, "final"), "no final/");
    cr_expect_eq(state_number(out, "final", "step"), (double)expect_stop);
    cr_expect_eq(qlt_run_already_finished(out, 60), 1, "--resume auto must see the run as finished");

    /* best/ is a full checkpoint: resumed from it, the count starts again from 0 at the best step and the
     * same curve stops the run at the same step */
    char *stop_dir = qlt_path_join(out, name), *final_dir = qlt_path_join(out, "final"),
         *best_dir = qlt_path_join(out, "best");
    cr_assert_eq(qlt_remove_tree(stop_dir), 0);
    cr_assert_eq(qlt_remove_tree(final_dir), 0);
    cr_assert_eq(run(&cfg, best_dir, &stopped), 0, "%s", qlt_error());
    cr_expect_eq(stopped, expect_stop, "resumed from best/: stopped at %lld, expected %lld", (long long)stopped,
                 (long long)expect_stop);
    cr_expect_eq(state_number(out, name, "best_step"), (double)best_step);
    free(stop_dir);
    free(final_dir);
    free(best_dir);
    qlt_config_free(&cfg);
    free(out);
    files_free(&f);
}

/* Early stopping needs evaluations: without eval data or train.eval_every, one line naming the key. */
Test(run_control, early_stopping_needs_evaluations) {
    run_files f;
    files_setup(&f);
    qlt_config cfg;
    load_config(&cfg, &f, "unused");
    set(&cfg, "train.early_stopping_patience=2");
    set(&cfg, "train.eval_every=5");
    cr_expect_eq(qlt_config_validate(&cfg), -1, "no eval data must be refused");
    cr_expect(strstr(qlt_error(), "train.early_stopping_patience") && strstr(qlt_error(), "data.eval"), "%s",
              qlt_error());
    set(&cfg, "data.eval=%s", f.eval);
    set(&cfg, "train.eval_every=0");
    cr_expect_eq(qlt_config_validate(&cfg), -1, "train.eval_every 0 must be refused");
    cr_expect(strstr(qlt_error(), "train.early_stopping_patience") && strstr(qlt_error(), "train.eval_every"), "%s",
              qlt_error());
    set(&cfg, "train.eval_every=5");
    cr_expect_eq(qlt_config_validate(&cfg), 0, "%s", qlt_error());
    qlt_config_free(&cfg);
    files_free(&f);
}

/* Starts QLT_BINARY with argv (NULL-terminated, argv[0] included), its stdout + stderr into log. */
static pid_t spawn(char *const argv[], const char *log) {
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork failed");
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
        execv(QLT_BINARY, argv);
        _exit(127);
    }
    return pid;
}

/* Waits (up to 120 s) until out/metrics.jsonl holds a step's line; fails if the child ends first. */
static void wait_for_first_step(pid_t pid, const char *out) {
    char *path = qlt_path_join(out, "metrics.jsonl");
    for (int i = 0; i < 12000; i++) {
        char *text = NULL;
        int has_step = qlt_file_exists(path) && qlt_read_file(path, &text, NULL) == 0 && strstr(text, "\"loss\"");
        free(text);
        if (has_step) break;
        int status;
        cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "the run ended before its first step");
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    qlt_error_clear();
    free(path);
}

static int wait_status(pid_t pid) {
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the run was killed by signal %d instead of exiting", WTERMSIG(status));
    return WEXITSTATUS(status);
}

static char *read_text(const char *path) {
    char *text;
    cr_assert_eq(qlt_read_file(path, &text, NULL), 0, "%s", qlt_error());
    return text;
}

/* The bytes of out/final/adapter_model.safetensors. */
static char *final_adapter(const char *out, size_t *len) {
    char *path = qlt_path_join(out, "final/adapter_model.safetensors"), *bytes;
    cr_assert_eq(qlt_read_file(path, &bytes, len), 0, "%s", qlt_error());
    free(path);
    return bytes;
}

/* SIGINT to a running `qlora-train train`: the step finishes, checkpoint-<step>/ is written, exit 130 with
 * the command that continues it; that command (--resume auto) runs to the end and writes final/ byte for
 * byte as a run that was never interrupted; run once more, it says the run is finished and exits 0. */
Test(run_control, sigint_checkpoints_and_resume_is_exact, .timeout = QLT_TEST_TIMEOUT_S) {
    run_files f;
    files_setup(&f);
    char *straight = qlt_path_join(f.tmp, "straight"), *stopped = qlt_path_join(f.tmp, "stopped");
    char *log = qlt_path_join(f.tmp, "stopped.log"), *args = NULL, *output = NULL;
    const char *steps = "train.max_steps=300";
    cr_assert(asprintf(&args, "train --config %s --set %s --set output.dir=%s", f.config, steps, straight) > 0);
    cr_assert_eq(test_run_cli(NULL, args, &output), 0, "%s", output);
    free(output);
    free(args);

    char set_out[1024];
    snprintf(set_out, sizeof set_out, "output.dir=%s", stopped);
    char *argv[] = {"qlora-train", "train", "--config", f.config, "--set", (char *)steps, "--set", set_out, NULL};
    pid_t pid = spawn(argv, log);
    wait_for_first_step(pid, stopped);
    cr_assert_eq(kill(pid, SIGINT), 0);
    int status = wait_status(pid);
    char *said = read_text(log);
    cr_assert_eq(status, 130, "exit status %d after SIGINT: %s", status, said);
    char *ck = qlt_checkpoint_find_latest(stopped);
    cr_assert(ck, "no checkpoint after SIGINT: %s", said);
    long long at = atoll(strrchr(ck, '-') + 1);
    cr_expect(at >= 1 && at < 300, "checkpoint %s", ck);
    cr_expect(!dir_in(stopped, "final"), "an interrupted run must not write final/");
    char resume_hint[2048];
    snprintf(resume_hint, sizeof resume_hint, "--config %s/run_config.json --resume auto", stopped);
    cr_expect(strstr(said, "SIGINT") && strstr(said, resume_hint) && strstr(said, strrchr(ck, '/') + 1),
              "the run must say how to continue: %s", said);

    cr_assert(asprintf(&args, "train %s", resume_hint) > 0);
    cr_assert_eq(test_run_cli(NULL, args, &output), 0, "%s", output);
    free(output);
    size_t len_a, len_b;
    char *a = final_adapter(straight, &len_a), *b = final_adapter(stopped, &len_b);
    cr_assert_eq(len_a, len_b);
    cr_expect(memcmp(a, b, len_a) == 0, "final/adapter_model.safetensors differs from the uninterrupted run's");
    cr_assert_eq(test_run_cli(NULL, args, &output), 0, "%s", output);
    cr_expect(strstr(output, "already finished at step 300"), "%s", output);
    free(output);
    free(args);
    free(a);
    free(b);
    free(said);
    free(ck);
    free(log);
    free(straight);
    free(stopped);
    files_free(&f);
}

/* SIGTERM: the same orderly stop, exit 143. Two SIGINTs at once: the second exits at once (130); the
 * checkpoints written before are intact and the run continues from them. */
Test(run_control, sigterm_and_a_second_sigint, .timeout = QLT_TEST_TIMEOUT_S) {
    run_files f;
    files_setup(&f);
    char *out = qlt_path_join(f.tmp, "run"), *log = qlt_path_join(f.tmp, "run.log");
    char set_out[1024];
    snprintf(set_out, sizeof set_out, "output.dir=%s", out);
    char *argv[] = {"qlora-train", "train", "--config", f.config, "--set", "train.max_steps=100000",
                    "--set", set_out, NULL};
    pid_t pid = spawn(argv, log);
    wait_for_first_step(pid, out);
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int status = wait_status(pid);
    char *said = read_text(log);
    cr_expect_eq(status, 143, "exit status %d after SIGTERM: %s", status, said);
    cr_expect(strstr(said, "SIGTERM"), "%s", said);
    char *ck = qlt_checkpoint_find_latest(out);
    cr_expect(ck, "no checkpoint after SIGTERM: %s", said);
    free(ck);
    free(said);

    char *argv2[] = {"qlora-train", "train", "--config", f.config, "--set", "train.max_steps=100000", "--set",
                     set_out, "--set", "output.save_every=1", "--resume", "auto", NULL};
    pid = spawn(argv2, log);
    char *metrics = qlt_path_join(out, "metrics.jsonl"), *before = read_text(metrics);
    for (int i = 0; i < 12000; i++) { /* the resumed run's first step */
        char *now = read_text(metrics);
        int grew = strlen(now) > strlen(before);
        free(now);
        if (grew) break;
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    kill(pid, SIGINT);
    kill(pid, SIGINT);
    status = wait_status(pid);
    said = read_text(log);
    cr_expect_eq(status, 130, "exit status %d after two SIGINTs: %s", status, said);
    char *args = NULL, *output = NULL;
    cr_assert(asprintf(&args, "train --config %s --set train.max_steps=%d --set %s --resume auto", f.config, 3, set_out) > 0);
    /* whatever step it was at, the newest complete checkpoint loads (its CRCs hold) */
    int rc = test_run_cli(NULL, args, &output);
    cr_expect(rc == 0 && strstr(output, "resumed from"), "exit %d: %s", rc, output);
    free(output);
    free(args);
    free(said);
    free(before);
    free(metrics);
    free(log);
    free(out);
    files_free(&f);
}

/* A 3-step run into out with checkpoint-3/ (and optionally other settings already in cfg). */
static void three_steps(qlt_config *cfg, const run_files *f, const char *out) {
    load_config(cfg, f, out);
    set(cfg, "train.max_steps=3");
    set(cfg, "output.save_every=3");
    validate(cfg);
    cr_assert_eq(run(cfg, NULL, NULL), 0, "%s", qlt_error());
}

/* Expects resume of out to be refused with a message holding every needle. */
static void expect_refused(const qlt_config *cfg, const char *what, const char *const needles[]) {
    cr_expect_eq(run(cfg, "auto", NULL), -1, "%s: resume must be refused", what);
    for (int i = 0; needles[i]; i++)
        cr_expect(strstr(qlt_error(), needles[i]), "%s: the message lacks '%s': %s", what, needles[i], qlt_error());
}

/* A byte flipped inside the adapter's data or a file of another size: refused by its CRC-32 / size, naming
 * the checkpoint and the file; the file put back, the same checkpoint resumes. */
Test(run_control, resume_refuses_a_damaged_checkpoint) {
    run_files f;
    files_setup(&f);
    char *out = qlt_path_join(f.tmp, "run");
    qlt_config cfg;
    three_steps(&cfg, &f, out);
    char *adapter = qlt_path_join(out, "checkpoint-3/adapter_model.safetensors");
    size_t len;
    char *bytes;
    cr_assert_eq(qlt_read_file(adapter, &bytes, &len), 0);
    bytes[len - 7] ^= 0x10; /* a bit of the last tensor's data: the file still parses */
    test_write_bytes(adapter, bytes, len);
    const char *crc[] = {"checkpoint-3", "adapter_model.safetensors", "CRC-32", NULL};
    expect_refused(&cfg, "a flipped byte", crc);
    bytes[len - 7] ^= 0x10;
    test_write_bytes(adapter, bytes, len);

    char *opt = qlt_path_join(out, "checkpoint-3/optimizer.safetensors");
    char *opt_bytes;
    size_t opt_len;
    cr_assert_eq(qlt_read_file(opt, &opt_bytes, &opt_len), 0);
    test_write_bytes(opt, opt_bytes, opt_len - 4);
    const char *size[] = {"checkpoint-3", "optimizer.safetensors", "bytes", NULL};
    expect_refused(&cfg, "a truncated file", size);
    test_write_bytes(opt, opt_bytes, opt_len);

    set(&cfg, "train.max_steps=4");
    int64_t step;
    cr_expect_eq(run(&cfg, "auto", &step), 0, "the repaired checkpoint: %s", qlt_error());
    cr_expect_eq(step, 4);
    free(opt_bytes);
    free(opt);
    free(bytes);
    free(adapter);
    qlt_config_free(&cfg);
    free(out);
    files_free(&f);
}

/* A checkpoint of another base model (tiny-qwen2: the same vocabulary, another architecture), of another LoRA
 * shape, or of another tokenizer (its recorded hash edited): one line naming the checkpoint and the mismatch. */
Test(run_control, resume_refuses_another_model_lora_or_tokenizer) {
    run_files f;
    files_setup(&f);
    char *out = qlt_path_join(f.tmp, "run");
    qlt_config cfg;
    three_steps(&cfg, &f, out);
    char *qwen2 = test_fixture_path("tiny-qwen2", NULL);
    set(&cfg, "model.path=%s", qwen2);
    const char *model[] = {"checkpoint-3", "another base model", qwen2, NULL};
    expect_refused(&cfg, "another base model", model);
    free(qwen2);

    qlt_config_free(&cfg);
    load_config(&cfg, &f, out);
    set(&cfg, "train.max_steps=3");
    set(&cfg, "lora.alpha=16");
    const char *lora[] = {"checkpoint-3", "LoRA", "alpha 8", "alpha 16", NULL};
    expect_refused(&cfg, "another lora.alpha", lora);

    set(&cfg, "lora.alpha=8");
    char *state = qlt_path_join(out, "checkpoint-3/trainer_state.json"), *text = read_text(state);
    char *tok = strstr(text, "\"tokenizer\":\t\"none\"");
    cr_assert(tok, "%s", text);
    char *edited = NULL;
    *tok = '\0';
    cr_assert(asprintf(&edited, "%s\"tokenizer\":\t\"0123456789abcdef\"%s", text,
                       tok + strlen("\"tokenizer\":\t\"none\"")) > 0);
    test_write_text(state, edited);
    const char *tokenizer[] = {"checkpoint-3", "another tokenizer", "0123456789abcdef", NULL};
    expect_refused(&cfg, "another tokenizer", tokenizer);
    free(edited);
    free(text);
    free(state);
    qlt_config_free(&cfg);
    free(out);
    files_free(&f);
}

/* The pid of a process that has ended. */
static pid_t dead_pid(void) {
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) _exit(0);
    int status;
    waitpid(pid, &status, 0);
    return pid;
}

/* A run killed while saving leaves checkpoint-<step>.tmp-<pid>/ (and final.tmp-<pid>/); one killed while
 * replacing a directory leaves it as NAME.old-<pid>. The next start removes the temporaries and puts the
 * moved-aside directory back, one line each. */
Test(run_control, leftover_temporary_saves_are_removed) {
    run_files f;
    files_setup(&f);
    char *out = qlt_path_join(f.tmp, "run");
    qlt_config cfg;
    three_steps(&cfg, &f, out);
    pid_t dead = dead_pid();
    char tmp_ck[64], tmp_final[64], old_ck[64];
    snprintf(tmp_ck, sizeof tmp_ck, "checkpoint-6.tmp-%d", (int)dead);
    snprintf(tmp_final, sizeof tmp_final, "final.tmp-%d", (int)dead);
    snprintf(old_ck, sizeof old_ck, "checkpoint-3.old-%d", (int)dead);
    char *p1 = qlt_path_join(out, tmp_ck), *p2 = qlt_path_join(out, tmp_final), *p3 = qlt_path_join(out, old_ck);
    char *ck = qlt_path_join(out, "checkpoint-3");
    cr_assert_eq(qlt_mkdirs(p1), 0);
    cr_assert_eq(qlt_mkdirs(p2), 0);
    char *half = qlt_path_join(p1, "adapter_model.safetensors");
    test_write_text(half, "half a file");
    cr_assert_eq(rename(ck, p3), 0);
    set(&cfg, "train.max_steps=4");
    int64_t step;
    cr_assert_eq(run(&cfg, "auto", &step), 0, "%s", qlt_error());
    cr_expect_eq(step, 4, "resumed from the restored checkpoint-3: ended at %lld", (long long)step);
    cr_expect(!dir_in(out, tmp_ck), "%s was not removed", tmp_ck);
    cr_expect(!dir_in(out, tmp_final), "%s was not removed", tmp_final);
    cr_expect(!dir_in(out, old_ck), "%s was not put back", old_ck);
    cr_expect(dir_in(out, "checkpoint-3"), "checkpoint-3 was not restored");
    free(half);
    free(ck);
    free(p1);
    free(p2);
    free(p3);
    qlt_config_free(&cfg);
    free(out);
    files_free(&f);
}
