/* run_control.c: see run_control.h. */
#define _GNU_SOURCE
#include "train/run_control.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/trainer.h"

static volatile sig_atomic_t caught_signal;

/* Only async-signal-safe calls here: write and _exit. */
static void on_stop_signal(int sig) {
    if (caught_signal) _exit(128 + sig); /* the second one: at once (saves are atomic, checkpoints intact) */
    caught_signal = sig;
    static const char note[] = "\nqlora-train: stopping after this step and writing a checkpoint (again to quit at "
                               "once)\n";
    ssize_t ignored = write(STDERR_FILENO, note, sizeof note - 1);
    (void)ignored;
}

static void install_handlers(void) {
    caught_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* file writes in progress go on */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int qlt_run_signal_caught(void) { return caught_signal; }

/* The pid in NAME.tmp-<pid> / NAME.old-<pid> (what the atomic saves name their temporaries), or 0. *kind gets
 * 't' or 'o' and *base_len the length of NAME. */
static int leftover_pid(const char *name, char *kind, size_t *base_len) {
    const char *tmp = strstr(name, ".tmp-"), *old = strstr(name, ".old-");
    const char *mark = tmp ? tmp : old;
    if (!mark || mark == name) return 0;
    const char *digits = mark + 5;
    if (!*digits || strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 9) return 0;
    *kind = tmp ? 't' : 'o';
    *base_len = (size_t)(mark - name);
    return atoi(digits);
}

/* Temporary saves of a run that was killed: NAME.tmp-<pid> is removed; NAME.old-<pid> (the earlier NAME, moved
 * aside while a save replaced it) is put back when NAME is missing, else removed. A process still running
 * under that pid (another run writing here) is left alone. */
static int remove_leftovers(const char *output_dir) {
    DIR *d = opendir(output_dir);
    if (!d) return 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        char kind;
        size_t base_len;
        int pid = leftover_pid(e->d_name, &kind, &base_len);
        if (pid <= 0 || pid == (int)getpid() || kill(pid, 0) == 0 || errno == EPERM) continue;
        char *path = qlt_path_join(output_dir, e->d_name);
        char *base = qlt_xstrdup(path);
        base[strlen(output_dir) + 1 + base_len] = '\0';
        if (kind == 'o' && !qlt_dir_exists(base) && !qlt_file_exists(base)) {
            fprintf(stderr, "qlora-train: %s: restoring it from %s, left by a run that was killed while replacing it\n",
                    base, e->d_name);
            if (rename(path, base) != 0) rc = qlt_fail("%s: cannot rename to %s: %s", path, base, strerror(errno));
        } else {
            fprintf(stderr, "qlora-train: removing %s, the unfinished save of a run that was killed\n", path);
            rc = qlt_remove_tree(path);
        }
        free(base);
        free(path);
    }
    closedir(d);
    return rc;
}

int qlt_run_begin(qlt_trainer *t) {
    t->run = (qlt_run_state){.best_eval_loss = NAN, .best_step = -1};
    install_handlers();
    return qlt_dp_is_root(t) ? remove_leftovers(t->cfg->output.dir) : 0; /* data parallel: rank 0 writes */
}

int qlt_run_after_eval(qlt_trainer *t, double loss) {
    qlt_run_state *r = &t->run;
    const qlt_config *cfg = t->cfg;
    int first = isnan(r->best_eval_loss);
    if (first || loss < r->best_eval_loss - (double)cfg->train.early_stopping_min_delta)
        r->evals_without_improvement = 0;
    else
        r->evals_without_improvement++;
    int patience = cfg->train.early_stopping_patience;
    if (patience > 0 && r->evals_without_improvement >= patience) r->early_stopped = 1;
    if (!(first || loss < r->best_eval_loss)) return 0;
    r->best_eval_loss = loss;
    r->best_step = t->step;
    if (!cfg->output.save_best) return 0;
    char *best = qlt_path_join(cfg->output.dir, "best");
    int rc = qlt_checkpoint_save(t, best);
    if (rc == 0) fprintf(stderr, "qlora-train: best eval loss so far (%.4f): step %lld saved to %s\n", loss,
                         (long long)t->step, best);
    free(best);
    return rc;
}

int qlt_run_should_stop(qlt_trainer *t, int signal) {
    const qlt_config *cfg = t->cfg;
    if (signal) {
        t->run.stop_signal = signal;
        fprintf(stderr, "qlora-train: %s: stopped after step %lld with a checkpoint in %s/checkpoint-%lld; continue "
                        "with `qlora-train train --config %s/run_config.json --resume auto`\n",
                signal == SIGINT ? "SIGINT" : "SIGTERM", (long long)t->step, cfg->output.dir, (long long)t->step,
                cfg->output.dir);
        return 1;
    }
    if (!t->run.early_stopped) return 0;
    fprintf(stderr, "qlora-train: early stop at step %lld: eval loss did not improve by %g "
                    "(train.early_stopping_min_delta) for %lld evals; best %.6f at step %lld\n",
            (long long)t->step, cfg->train.early_stopping_min_delta, (long long)t->run.evals_without_improvement,
            t->run.best_eval_loss, (long long)t->run.best_step);
    return 1;
}

int qlt_run_exit_status(const qlt_trainer *t) { return t->run.stop_signal ? 128 + t->run.stop_signal : 0; }

int qlt_run_already_finished(const char *output_dir, int64_t total_steps) {
    char *final_dir = qlt_path_join(output_dir, "final");
    char *path = qlt_path_join(final_dir, "trainer_state.json");
    char *text = NULL;
    int finished = 0;
    if (qlt_file_exists(path) && qlt_read_file(path, &text, NULL) == 0) {
        cJSON *s = cJSON_Parse(text);
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(s, "step");
        int early = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "early_stopped"));
        if (cJSON_IsNumber(step) && (step->valuedouble == (double)total_steps || early)) {
            finished = 1;
            fprintf(stderr, "qlora-train: %s already finished at step %.0f of %lld%s (its adapter is in %s): nothing "
                            "to resume; %sset output.overwrite: true to start again\n", output_dir,
                    step->valuedouble, (long long)total_steps, early ? ", stopped early" : "", final_dir,
                    early ? "" : "raise train.max_steps to train on, or ");
        }
        cJSON_Delete(s);
    }
    qlt_error_clear();
    free(text);
    free(path);
    free(final_dir);
    return finished;
}
