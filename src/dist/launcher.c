/* launcher.c: starts and watches the ranks of `train --gpus N` (see launcher.h). SIGINT from a terminal
 * reaches every rank directly (one process group), so the launcher ignores it and lets the ranks agree on
 * the stop; a SIGTERM sent to the launcher alone is passed on to every rank. */
#define _GNU_SOURCE
#include "dist/launcher.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/env.h"
#include "common/error.h"

static volatile sig_atomic_t term_received;

static void on_term(int sig) {
    (void)sig;
    term_received = 1;
}

/* A TCP port nobody listens on now (the kernel's pick), for the ranks' rendezvous. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static void describe(int status, char *out, size_t size) {
    if (WIFSIGNALED(status))
        snprintf(out, size, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(out, size, "exited with status %d", WEXITSTATUS(status));
}

static int interrupted(int status) {
    return WIFEXITED(status) && (WEXITSTATUS(status) == 130 || WEXITSTATUS(status) == 143);
}

/* SIGTERM to every rank still running, then SIGKILL to those left after grace_s; collects them all. */
static void end_all(pid_t *pids, int *alive, int n, double grace_s) {
    for (int r = 0; r < n; r++)
        if (alive[r]) kill(pids[r], SIGTERM);
    double deadline = qlt_now_seconds() + grace_s;
    int left = 0;
    for (int r = 0; r < n; r++) left += alive[r];
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int r = 0; r < n; r++)
                if (alive[r] && pids[r] == pid) alive[r] = 0, left--;
            continue;
        }
        if (qlt_now_seconds() > deadline) {
            for (int r = 0; r < n; r++)
                if (alive[r]) kill(pids[r], SIGKILL);
            deadline = 1e300; /* SIGKILL cannot be refused: wait for them */
        }
        usleep(20 * 1000);
    }
}

int qlt_launch_ranks(int argc, char **argv, int n_ranks, double grace_s) {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        qlt_fail("--gpus: cannot find this program's own path (/proc/self/exe): %s", strerror(errno));
        return 1;
    }
    exe[len] = 0;
    char port_text[16], world_text[16];
    const char *port_env = qlt_env(QLT_ENV_MASTER_PORT);
    int port = port_env ? atoi(port_env) : free_port();
    if (port <= 0 || port > 65535) {
        qlt_fail("--gpus: no free TCP port for the ranks' rendezvous (or MASTER_PORT is not one): set MASTER_PORT");
        return 1;
    }
    snprintf(port_text, sizeof port_text, "%d", port);
    snprintf(world_text, sizeof world_text, "%d", n_ranks);
    char **child_argv = qlt_xcalloc((size_t)argc + 1, sizeof *child_argv);
    child_argv[0] = exe;
    for (int i = 1; i < argc; i++) child_argv[i] = argv[i];
    pid_t *pids = qlt_xcalloc((size_t)n_ranks, sizeof *pids);
    int *alive = qlt_xcalloc((size_t)n_ranks, sizeof *alive);
    struct sigaction ignore = {.sa_handler = SIG_IGN}, term = {.sa_handler = on_term}, old_int, old_term;
    sigaction(SIGINT, &ignore, &old_int);
    sigaction(SIGTERM, &term, &old_term);
    fprintf(stderr, "qlora-train: starting %d ranks (one per GPU, rendezvous at 127.0.0.1:%d)\n", n_ranks, port);
    fflush(stdout);
    fflush(stderr);
    int rc = 0, started = 0;
    for (int r = 0; r < n_ranks; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            char rank_text[16];
            snprintf(rank_text, sizeof rank_text, "%d", r);
            signal(SIGINT, SIG_DFL); /* the trainer installs its own handlers */
            signal(SIGTERM, SIG_DFL);
            setenv(qlt_env_name(QLT_ENV_RANK), rank_text, 1);
            setenv(qlt_env_name(QLT_ENV_LOCAL_RANK), rank_text, 1);
            setenv(qlt_env_name(QLT_ENV_WORLD_SIZE), world_text, 1);
            setenv(qlt_env_name(QLT_ENV_MASTER_ADDR), "127.0.0.1", 1);
            setenv(qlt_env_name(QLT_ENV_MASTER_PORT), port_text, 1);
            execv(exe, child_argv);
            dprintf(STDERR_FILENO, "qlora-train: error: cannot start rank %d (%s): %s\n", r, exe, strerror(errno));
            _exit(127);
        }
        if (pid < 0) {
            rc = qlt_fail("--gpus %d: cannot start rank %d: fork failed: %s", n_ranks, r, strerror(errno));
            break;
        }
        pids[r] = pid;
        alive[r] = 1;
        started++;
    }
    int exit_status = 0, left = started;
    while (rc == 0 && left > 0) {
        if (term_received) { /* passed on; the ranks checkpoint and end with 143 */
            term_received = 0;
            for (int r = 0; r < n_ranks; r++)
                if (alive[r]) kill(pids[r], SIGTERM);
        }
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            break;
        }
        int r = 0;
        while (r < n_ranks && !(alive[r] && pids[r] == pid)) r++;
        if (r == n_ranks) continue;
        alive[r] = 0;
        left--;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        if (interrupted(status)) {
            exit_status = WEXITSTATUS(status);
            continue;
        }
        char how[96];
        describe(status, how, sizeof how);
        rc = qlt_fail("rank %d of %d (GPU %d, pid %d) %s: the other ranks were stopped; its own error is above, and "
                      "the last checkpoint in output.dir is intact (continue with --resume auto)", r, n_ranks, r, (int)pid,
                      how);
    }
    if (rc != 0) end_all(pids, alive, n_ranks, grace_s);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free(child_argv);
    free(pids);
    free(alive);
    return rc != 0 ? 1 : exit_status;
}
