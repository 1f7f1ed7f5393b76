/* sweep_runner.c: the sweep's scheduler. A slot is one GPU of --gpus (or the one default device); a run
 * starts whenever a slot is free, as a child process whose stdout and stderr come back through a pipe and
 * are appended to RUN_DIR/train.log (and, one run at a time, shown as they come). poll() waits for output of
 * any child; end of output means the child is ending, and waitpid collects its status. A failed run is
 * recorded (its reason: the last "qlora-train: error:" line of its log) and the sweep goes on. Each ended
 * run leaves RUN_DIR/sweep_status.json (status, reason, wall time), which a restarted sweep reads for the
 * runs it skips. */
#define _GNU_SOURCE
#include "sweep/sweep_runner.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "sweep/sweep_summary.h"

#define LOG_MARK "==== qlora-train sweep: run started"
#define ERROR_PREFIX "qlora-train: error: "

typedef struct slot {
    int gpu;          /* -1: no CUDA_VISIBLE_DEVICES for this slot */
    int run;          /* index of the run in it, -1 = free */
    pid_t pid;
    int fd;           /* read end of the child's output pipe; -1 once it closed */
    FILE *log;        /* RUN_DIR/train.log */
    double started;
} slot;

static int final_exists(const qlt_sweep_run *r) {
    char *final_dir = qlt_path_join(r->dir, "final");
    int yes = qlt_dir_exists(final_dir);
    free(final_dir);
    return yes;
}

/* The highest N of RUN_DIR/checkpoint-N, or -1. */
static long long newest_checkpoint(const char *dir) {
    DIR *d = opendir(dir);
    long long best = -1;
    if (!d) return best;
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        if (strncmp(e->d_name, "checkpoint-", 11) != 0) continue;
        long long n = strtoll(e->d_name + 11, &end, 10);
        if (end != e->d_name + 11 && !*end && n > best) best = n;
    }
    closedir(d);
    return best;
}

void qlt_sweep_run_state(const qlt_sweep_run *r, char *buf, size_t size) {
    long long ckpt = newest_checkpoint(r->dir);
    if (final_exists(r)) snprintf(buf, size, "finished (skipped)");
    else if (ckpt >= 0) snprintf(buf, size, "resumes from checkpoint-%lld", ckpt);
    else snprintf(buf, size, "new");
}

/* ---- RUN_DIR/sweep_status.json ------------------------------------------------------------------------- */

static void write_status(const qlt_sweep_run *r, const qlt_sweep_result *res) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", qlt_sweep_status_text(res->status));
    cJSON_AddStringToObject(o, "reason", res->reason);
    cJSON_AddNumberToObject(o, "wall_s", res->wall_s);
    char *text = cJSON_Print(o);
    char *path = qlt_path_join(r->dir, "sweep_status.json");
    if (qlt_write_file_atomic(path, text, strlen(text)) != 0) { /* the summary still has it */
        fprintf(stderr, "qlora-train: sweep: %s\n", qlt_error());
        qlt_error_clear();
    }
    free(path);
    free(text);
    cJSON_Delete(o);
}

/* The wall time an earlier start of the sweep recorded for a run it finished; -1 when none. */
static double recorded_wall(const qlt_sweep_run *r) {
    char *path = qlt_path_join(r->dir, "sweep_status.json"), *text = NULL;
    double wall = -1;
    if (qlt_file_exists(path) && qlt_read_file(path, &text, NULL) == 0) {
        cJSON *o = cJSON_Parse(text);
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "wall_s");
        if (cJSON_IsNumber(w)) wall = w->valuedouble;
        cJSON_Delete(o);
    }
    qlt_error_clear();
    free(text);
    free(path);
    return wall;
}

/* The last "qlora-train: error:" line the run's latest attempt wrote into its log, without the prefix. */
static int last_error_line(const char *log_path, char *out, size_t size) {
    char *text = NULL;
    if (qlt_read_file(log_path, &text, NULL) != 0) {
        qlt_error_clear();
        return 0;
    }
    const char *from = text, *mark;
    while ((mark = strstr(from, LOG_MARK))) from = mark + 1;
    int found = 0;
    for (const char *line = from; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        size_t plen = strlen(ERROR_PREFIX);
        if (len > plen && !strncmp(line, ERROR_PREFIX, plen)) {
            snprintf(out, size, "%.*s", (int)(len - plen), line + plen);
            found = 1;
        }
        line = end ? end + 1 : NULL;
    }
    free(text);
    return found;
}

/* ---- children ---------------------------------------------------------------------------------------------- */

static char **child_argv(const qlt_sweep *sw, const qlt_sweep_run *r, const char *exe) {
    int n = 0, cap = 2 * r->n_set + 16;
    char **argv = qlt_xcalloc((size_t)cap, sizeof *argv);
    argv[n++] = qlt_xstrdup(exe);
    argv[n++] = qlt_xstrdup("train");
    argv[n++] = qlt_xstrdup("--config");
    argv[n++] = qlt_xstrdup(sw->base);
    for (int i = 0; i < r->n_set; i++) {
        argv[n++] = qlt_xstrdup("--set");
        char *a = qlt_xmalloc(strlen(r->keys[i]) + strlen(r->values[i]) + 2);
        sprintf(a, "%s=%s", r->keys[i], r->values[i]);
        argv[n++] = a;
    }
    char *cache = qlt_path_join(sw->out_dir, "cache");
    const char *fixed[][2] = {{"output.dir", r->dir}, {"data.cache_dir", cache}};
    for (int i = 0; i < 2; i++) {
        argv[n++] = qlt_xstrdup("--set");
        char *a = qlt_xmalloc(strlen(fixed[i][0]) + strlen(fixed[i][1]) + 2);
        sprintf(a, "%s=%s", fixed[i][0], fixed[i][1]);
        argv[n++] = a;
    }
    free(cache);
    argv[n++] = qlt_xstrdup("--resume");
    argv[n++] = qlt_xstrdup("auto");
    argv[n] = NULL;
    return argv;
}

static void free_argv(char **argv) {
    for (char **a = argv; *a; a++) free(*a);
    free(argv);
}

/* Starts run `index` in slot s. */
static int start_run(const qlt_sweep *sw, const qlt_sweep_options *opt, int index, slot *s, int n_runs_total) {
    const qlt_sweep_run *r = &sw->runs[index];
    QLT_TRY(qlt_mkdirs(r->dir));
    char state[128];
    qlt_sweep_run_state(r, state, sizeof state);
    char *log_path = qlt_path_join(r->dir, "train.log");
    FILE *log = fopen(log_path, "a");
    if (!log) {
        int rc = qlt_fail("%s: cannot write the run's log: %s", log_path, strerror(errno));
        free(log_path);
        return rc;
    }
    char **argv = child_argv(sw, r, opt->exe);
    fprintf(log, "%s (%s)\n", LOG_MARK, state);
    fprintf(log, "$");
    if (s->gpu >= 0) fprintf(log, " CUDA_VISIBLE_DEVICES=%d", s->gpu);
    for (char **a = argv; *a; a++) fprintf(log, " %s", *a);
    fprintf(log, "\n");
    fflush(log);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fclose(log);
        free(log_path);
        free_argv(argv);
        return qlt_fail("cannot create a pipe for run %s: %s", r->name, strerror(errno));
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) { /* the child: output into the pipe, its GPU, then the trainer */
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        if (s->gpu >= 0) {
            char gpu[16];
            snprintf(gpu, sizeof gpu, "%d", s->gpu);
            setenv("CUDA_VISIBLE_DEVICES", gpu, 1);
        }
        unsetenv("QLT_SWEEP_STOP_AFTER");
        execv(argv[0], argv);
        dprintf(STDERR_FILENO, ERROR_PREFIX "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    free_argv(argv);
    if (pid < 0) {
        close(fds[0]);
        fclose(log);
        free(log_path);
        return qlt_fail("cannot start run %s: fork failed: %s", r->name, strerror(errno));
    }
    s->run = index;
    s->pid = pid;
    s->fd = fds[0];
    s->log = log;
    s->started = qlt_now_seconds();
    char gpu[32] = "";
    if (s->gpu >= 0) snprintf(gpu, sizeof gpu, ", GPU %d", s->gpu);
    printf("start   %s (%d/%d, %s%s; log %s)\n", r->name, index + 1, n_runs_total, state, gpu, log_path);
    fflush(stdout);
    free(log_path);
    return 0;
}

/* The slot's child has closed its output: collects it and records how the run ended. */
static void finish_run(const qlt_sweep *sw, slot *s, qlt_sweep_result *res) {
    const qlt_sweep_run *r = &sw->runs[s->run];
    int status = 0;
    while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR) {
    }
    res->wall_s = qlt_now_seconds() - s->started;
    char *log_path = qlt_path_join(r->dir, "train.log");
    fclose(s->log);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && final_exists(r);
    res->status = ok ? QLT_SWEEP_DONE : QLT_SWEEP_FAILED;
    res->reason[0] = '\0';
    if (!ok && !last_error_line(log_path, res->reason, sizeof res->reason)) {
        if (WIFSIGNALED(status))
            snprintf(res->reason, sizeof res->reason, "killed by signal %d (%s)", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        else if (WEXITSTATUS(status) != 0)
            snprintf(res->reason, sizeof res->reason, "exited with status %d (see %s)", WEXITSTATUS(status), log_path);
        else
            snprintf(res->reason, sizeof res->reason, "ended without writing %s/final", r->dir);
    }
    write_status(r, res);
    if (ok) {
        qlt_sweep_metrics m;
        qlt_sweep_read_metrics(r->dir, &m);
        if (m.has_eval)
            printf("done    %s (best eval loss %.4f at step %lld, %.1f s)\n", r->name, m.best_eval_loss,
                   (long long)m.best_step, res->wall_s);
        else
            printf("done    %s (final train loss %.4f, %.1f s)\n", r->name, m.final_train_loss, res->wall_s);
    } else {
        printf("failed  %s: %s\n", r->name, res->reason);
    }
    fflush(stdout);
    free(log_path);
    s->run = -1;
    s->pid = 0;
    s->log = NULL;
}

/* Output of the child in slot s: into its log (and on stderr when it is the only slot). 0 at end of output. */
static int drain(slot *s, int echo) {
    char buf[8192];
    ssize_t got = read(s->fd, buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (got <= 0) return 0;
    fwrite(buf, 1, (size_t)got, s->log);
    fflush(s->log);
    if (echo) fwrite(buf, 1, (size_t)got, stderr);
    return 1;
}

static void summarize(const qlt_sweep *sw, const qlt_sweep_result *results) {
    if (qlt_sweep_write_summary(sw, results) != 0) {
        fprintf(stderr, "qlora-train: sweep: the summary was not written: %s\n", qlt_error());
        qlt_error_clear();
    }
}

int qlt_sweep_run_all(const qlt_sweep *sw, const qlt_sweep_options *opt) {
    QLT_TRY(qlt_mkdirs(sw->out_dir));
    int n_slots = opt->n_gpus > 0 ? opt->n_gpus : 1;
    slot *slots = qlt_xcalloc((size_t)n_slots, sizeof *slots);
    for (int i = 0; i < n_slots; i++) slots[i] = (slot){.gpu = opt->n_gpus > 0 ? opt->gpus[i] : -1, .run = -1, .fd = -1};
    qlt_sweep_result *results = qlt_xcalloc((size_t)sw->n_runs + 1, sizeof *results);
    for (int i = 0; i < sw->n_runs; i++) {
        results[i].wall_s = -1;
        if (final_exists(&sw->runs[i])) {
            results[i].status = QLT_SWEEP_SKIPPED;
            results[i].wall_s = recorded_wall(&sw->runs[i]);
            printf("skipped %s\n", sw->runs[i].name);
        }
    }
    fflush(stdout);
    summarize(sw, results);
    int next = 0, active = 0, ended = 0, stopped = 0, rc = 0;
    for (;;) {
        while (!stopped && rc == 0) { /* fill the free slots */
            while (next < sw->n_runs && results[next].status == QLT_SWEEP_SKIPPED) next++;
            int free_slot = -1;
            for (int i = 0; i < n_slots && free_slot < 0; i++)
                if (slots[i].run < 0) free_slot = i;
            if (next >= sw->n_runs || free_slot < 0) break;
            if (opt->stop_after > 0 && ended >= opt->stop_after) {
                stopped = 1;
                break;
            }
            if (start_run(sw, opt, next, &slots[free_slot], sw->n_runs) != 0) {
                rc = -1;
                break;
            }
            results[next++].status = QLT_SWEEP_RUNNING;
            active++;
        }
        if (active == 0) break;
        struct pollfd *pfd = qlt_xcalloc((size_t)n_slots, sizeof *pfd);
        int *which = qlt_xcalloc((size_t)n_slots, sizeof *which), n = 0;
        for (int i = 0; i < n_slots; i++)
            if (slots[i].run >= 0) pfd[n] = (struct pollfd){.fd = slots[i].fd, .events = POLLIN}, which[n++] = i;
        int ready = poll(pfd, (nfds_t)n, -1);
        for (int k = 0; k < n && ready > 0; k++) {
            if (!pfd[k].revents) continue;
            slot *s = &slots[which[k]];
            if (drain(s, n_slots == 1)) continue;
            close(s->fd);
            s->fd = -1;
            int index = s->run;
            finish_run(sw, s, &results[index]);
            active--;
            ended++;
            summarize(sw, results);
        }
        free(pfd);
        free(which);
    }
    int failed = 0;
    for (int i = 0; i < sw->n_runs; i++) {
        if (results[i].status == QLT_SWEEP_RUNNING) results[i].status = QLT_SWEEP_PENDING;
        failed += results[i].status == QLT_SWEEP_FAILED;
    }
    summarize(sw, results);
    char *md = qlt_path_join(sw->out_dir, "summary.md");
    if (stopped) printf("sweep stopped after %d runs (QLT_SWEEP_STOP_AFTER); start it again to go on\n", ended);
    printf("summary: %s (and summary.csv)\n", md);
    fflush(stdout);
    free(md);
    free(results);
    free(slots);
    if (rc != 0) return -1;
    return stopped ? 3 : failed ? 1 : 0;
}
