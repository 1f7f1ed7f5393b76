/* test_data_parallel.c: data parallel training without GPUs (docs/DISTRIBUTED.md): the batch sharding (pure
 * functions, every small case), the TCP rendezvous (forked processes exchange a blob; a rank that never comes
 * is named), the launcher environment's checks, and end to end on the CPU path under Open MPI's mpirun: two
 * ranks give the loss log and the adapter of one process with the same global batch, and a run continues with
 * another number of ranks. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "dist/comm.h"
#include "dist/rendezvous.h"
#include "formats/safetensors.h"
#include "train/data_parallel.h"
#include "train/run_metrics.h"
#include "test_util.h"

/* Every rank's micro-batches together read each row of the step's global batch once, in the places a
 * one-process run with grad_accum x world micro-batches reads them, with that run's dropout seed counters. */
Test(data_parallel, sharding_equals_one_process) {
    for (int world = 1; world <= 4; world++)
        for (int accum = 1; accum <= 3; accum++)
            for (int micro_batch = 1; micro_batch <= 3; micro_batch++)
                for (int64_t step = 0; step < 3; step++) {
                    int64_t global = (int64_t)world * accum * micro_batch, cursor = step * global + 5;
                    int seen[64] = {0};
                    for (int rank = 0; rank < world; rank++)
                        for (int m = 0; m < accum; m++) {
                            int64_t first = qlt_dp_micro_first_row(cursor, micro_batch, accum, rank, m);
                            int g = rank * accum + m; /* the one-process run's micro-batch */
                            cr_assert_eq(first, qlt_dp_micro_first_row(cursor, micro_batch, accum * world, 0, g),
                                         "world %d accum %d micro %d rank %d m %d", world, accum, micro_batch, rank, m);
                            cr_assert_eq(qlt_dp_global_micro(step, accum, world, rank, m),
                                         qlt_dp_global_micro(step, accum * world, 1, 0, g));
                            for (int b = 0; b < micro_batch; b++) {
                                int64_t row = first + b - cursor;
                                cr_assert(row >= 0 && row < global, "row %lld outside the batch", (long long)row);
                                seen[row]++;
                            }
                        }
                    for (int64_t row = 0; row < global; row++)
                        cr_assert_eq(seen[row], 1, "world %d accum %d micro %d: row %lld read %d times", world, accum,
                                     micro_batch, (long long)row, seen[row]);
                }
    /* the global micro-batch counter never repeats across steps and ranks */
    cr_assert_eq(qlt_dp_global_micro(1, 2, 3, 0, 0), qlt_dp_global_micro(0, 2, 3, 2, 1) + 1);
}

Test(data_parallel, eval_batches_each_scored_once) {
    for (int world = 1; world <= 5; world++)
        for (int64_t batch = 0; batch < 23; batch++) {
            int owners = 0;
            for (int rank = 0; rank < world; rank++) owners += qlt_dp_eval_owns(batch, rank, world);
            cr_assert_eq(owners, 1, "world %d: eval batch %lld scored by %d ranks", world, (long long)batch, owners);
        }
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* Forks ranks 0 .. started-1 of a world of `world`; each exchanges a 128-byte blob (rank 0's: bytes 0..127 plus
 * 7), exits 0 when it holds rank 0's blob, else writes its error to dir/rank-R.err and exits 1. Returns how
 * many ranks exited 0. */
static int run_rendezvous(const char *dir, int world, int started, double timeout_s) {
    int port = free_port();
    pid_t pids[8];
    for (int r = 0; r < started; r++) {
        pids[r] = fork();
        cr_assert(pids[r] >= 0);
        if (pids[r] == 0) {
            unsigned char blob[128];
            for (int i = 0; i < 128; i++) blob[i] = r == 0 ? (unsigned char)(i + 7) : 0;
            int rc = qlt_rendezvous_share("127.0.0.1", port, r, world, timeout_s, blob, sizeof blob);
            for (int i = 0; rc == 0 && i < 128; i++)
                if (blob[i] != (unsigned char)(i + 7)) rc = qlt_fail("rank %d: blob byte %d is %d", r, i, blob[i]);
            if (rc != 0) {
                char name[32];
                snprintf(name, sizeof name, "rank-%d.err", r);
                char *path = qlt_path_join(dir, name);
                FILE *f = fopen(path, "w");
                if (f) fprintf(f, "%s", qlt_error()), fclose(f);
                free(path);
            }
            _exit(rc == 0 ? 0 : 1);
        }
    }
    int ok = 0;
    for (int r = 0; r < started; r++) {
        int status;
        cr_assert_eq(waitpid(pids[r], &status, 0), pids[r]);
        ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    return ok;
}

static char *read_err(const char *dir, int rank) {
    char name[32], *text = NULL;
    snprintf(name, sizeof name, "rank-%d.err", rank);
    char *path = qlt_path_join(dir, name);
    if (qlt_read_file(path, &text, NULL) != 0) text = qlt_xstrdup("");
    free(path);
    return text;
}

Test(data_parallel, rendezvous_hands_the_blob_to_every_rank) {
    char *dir = test_tmpdir();
    cr_assert_eq(run_rendezvous(dir, 4, 4, 20.0), 4, "rank 0: %s", read_err(dir, 0));
    cr_assert_eq(run_rendezvous(dir, 1, 1, 1.0), 1); /* one rank: nothing to meet */
    qlt_remove_tree(dir);
    free(dir);
}

Test(data_parallel, rendezvous_names_the_rank_that_never_came) {
    char *dir = test_tmpdir();
    cr_assert_eq(run_rendezvous(dir, 4, 2, 1.5), 0); /* ranks 2 and 3 never start */
    char *err0 = read_err(dir, 0), *err1 = read_err(dir, 1);
    cr_expect(strstr(err0, "ranks 2, 3 of 4 did not arrive within 1.5 s") && strstr(err0, "train.dist_timeout_s"),
              "rank 0 said: %s", err0);
    cr_expect(strstr(err1, "rank 1:") && strstr(err1, "rank 0"), "rank 1 said: %s", err1);
    free(err0);
    free(err1);
    /* no rank 0 at all: a rank that cannot reach it says so in bounded time */
    int port = free_port();
    unsigned char blob[8];
    cr_assert_eq(qlt_rendezvous_share("127.0.0.1", port, 1, 2, 0.5, blob, sizeof blob), -1);
    cr_expect(strstr(qlt_error(), "rank 1: rank 0's rendezvous at 127.0.0.1:") && strstr(qlt_error(), "0.5 s"), "%s",
              qlt_error());
    qlt_remove_tree(dir);
    free(dir);
}

Test(data_parallel, launcher_environment_is_checked) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "WORLD_SIZE", "RANK",
                                       "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    qlt_dist_env env;
    cr_assert_eq(qlt_dist_env_read(&env), 0);
    cr_assert_eq(env.world, 1);
    setenv("WORLD_SIZE", "2", 1);
    cr_assert_eq(qlt_dist_env_read(&env), -1);
    cr_expect(strstr(qlt_error(), "RANK is unset"), "%s", qlt_error());
    setenv("RANK", "2", 1);
    cr_assert_eq(qlt_dist_env_read(&env), -1);
    cr_expect(strstr(qlt_error(), "RANK=2") && strstr(qlt_error(), "[0, 1]"), "%s", qlt_error());
    setenv("RANK", "1", 1);
    cr_assert_eq(qlt_dist_env_read(&env), -1);
    cr_expect(strstr(qlt_error(), "MASTER_ADDR is unset"), "%s", qlt_error());
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "http", 1);
    cr_assert_eq(qlt_dist_env_read(&env), -1);
    cr_expect(strstr(qlt_error(), "MASTER_PORT=http"), "%s", qlt_error());
    setenv("MASTER_PORT", "29500", 1);
    cr_assert_eq(qlt_dist_env_read(&env), 0, "%s", qlt_error());
    cr_expect(env.rank == 1 && env.world == 2 && env.local_rank == 1 && env.master_port == 29500);
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

/* Runs a shell command line, its output into *out (heap); returns its exit status. */
static int run_shell(const char *cmd, char **out) {
    char *full = NULL;
    cr_assert(asprintf(&full, "%s 2>&1", cmd) > 0);
    FILE *p = popen(full, "r");
    cr_assert(p);
    size_t cap = 1 << 16, n = 0, got;
    char *buf = qlt_xmalloc(cap);
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0)
        if ((n += got) + 1 >= cap) buf = qlt_xrealloc(buf, cap *= 2);
    buf[n] = 0;
    int status = pclose(p);
    free(full);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* `qlora-train train` of cfg under mpirun with `ranks` ranks (0: no mpirun), with extra arguments. Open MPI's
 * allocations live until exit: tests/lsan-mpi.supp keeps LeakSanitizer to qlora-train's own. No single-copy
 * (CMA) transfers between the ranks: containers often forbid the ptrace they need. */
static int train_ranks(int ranks, const char *cfg, const char *extra, char **out) {
    char *cmd = NULL;
    if (ranks == 0)
        cr_assert(asprintf(&cmd, "%s train --config %s --set data.eval_split=0.25 %s", QLT_BINARY, cfg, extra) > 0);
    else
        cr_assert(asprintf(&cmd,
                           "OMPI_MCA_mca_base_component_disable_dlclose=1 OMPI_MCA_btl_vader_single_copy_mechanism=none "
                           "LSAN_OPTIONS=suppressions=%s/../lsan-mpi.supp:fast_unwind_on_malloc=0 "
                           "mpirun --allow-run-as-root --oversubscribe -x LSAN_OPTIONS "
                           "-x OMPI_MCA_mca_base_component_disable_dlclose -np %d %s train --config %s "
                           "--set data.eval_split=0.25 %s",
                           QLT_TEST_DATA, ranks, QLT_BINARY, cfg, extra) > 0);
    int rc = run_shell(cmd, out);
    free(cmd);
    return rc;
}

/* max |a - b| / max |a| over the tensors of two adapter files (the same names and sizes). */
static double adapter_diff(const char *dir_a, const char *dir_b) {
    char *pa = qlt_path_join(dir_a, "final/adapter_model.safetensors");
    char *pb = qlt_path_join(dir_b, "final/adapter_model.safetensors");
    qlt_st_file a, b;
    cr_assert_eq(qlt_st_open(&a, pa), 0, "%s", qlt_error());
    cr_assert_eq(qlt_st_open(&b, pb), 0, "%s", qlt_error());
    cr_assert_eq(a.n_tensors, b.n_tensors);
    double worst = 0.0;
    for (int i = 0; i < a.n_tensors; i++) {
        int64_t n = 0, nb = 0;
        float *x = test_read_f32(&a, a.tensors[i].name, &n), *y = test_read_f32(&b, a.tensors[i].name, &nb);
        cr_assert_eq(n, nb);
        double e = test_rel_err(y, x, n);
        if (e > worst) worst = e;
        free(x);
        free(y);
    }
    qlt_st_close(&a);
    qlt_st_close(&b);
    free(pa);
    free(pb);
    return worst;
}

static void expect_same_losses(const char *dir_a, const char *dir_b, int64_t steps) {
    qlt_run_metrics a, b;
    cr_assert_eq(qlt_run_metrics_read(dir_a, &a), 0, "%s", qlt_error());
    cr_assert_eq(qlt_run_metrics_read(dir_b, &b), 0, "%s", qlt_error());
    cr_assert_eq(a.n_steps, steps);
    cr_assert_eq(b.n_steps, steps);
    for (int64_t i = 0; i < steps; i++) {
        cr_expect(fabs(a.loss[i] - b.loss[i]) <= 1e-5 * fabs(a.loss[i]), "step %lld: loss %.9g vs %.9g",
                  (long long)a.step[i], a.loss[i], b.loss[i]);
        cr_expect(fabs(a.grad_norm[i] - b.grad_norm[i]) <= 1e-4 * fabs(a.grad_norm[i]),
                  "step %lld: grad_norm %.9g vs %.9g", (long long)a.step[i], a.grad_norm[i], b.grad_norm[i]);
    }
    cr_assert_eq(a.n_evals, b.n_evals);
    for (int64_t i = 0; i < a.n_evals; i++)
        cr_expect(fabs(a.eval_loss[i] - b.eval_loss[i]) <= 1e-5 * fabs(a.eval_loss[i]), "eval %lld: %.9g vs %.9g",
                  (long long)i, a.eval_loss[i], b.eval_loss[i]);
    qlt_run_metrics_free(&a);
    qlt_run_metrics_free(&b);
}

/* Two ranks of micro_batch 2 x grad_accum 2 against one process of 2 x 4 (the same global batch of 8 rows, 24
 * rows: step 4 starts a new epoch), dropout on, an eval every 2 steps. The two runs add the same terms in
 * another order (each rank's two micro-batches, then the two ranks, vs four micro-batches in a row): float32
 * sums that differ by a few ulps, which Adam's m / sqrt(v) carries into the adapter at about that relative
 * size. 1e-4 of each tensor's largest value is the bound the CPU path's float32 mode is held to against its
 * reference after three AdamW steps (test_train.c); a wrong row, seed or scale moves the adapter by orders of
 * magnitude more (the first step's loss alone differs at 1e-2). */
Test(data_parallel, mpirun_two_ranks_equal_one_process, .timeout = QLT_TEST_TIMEOUT_S) {
    char *dir = test_tmpdir(), *rows = qlt_path_join(dir, "rows.jsonl"), *cfg = qlt_path_join(dir, "run.yaml");
    char *one = qlt_path_join(dir, "one"), *two = qlt_path_join(dir, "two"), *mixed = qlt_path_join(dir, "mixed");
    test_write_random_token_rows(rows, 7, 32);
    test_write_cpu_run_config(cfg, rows, "  max_steps: 4\n  eval_every: 2\n");
    char *out = NULL, *args = NULL;

    cr_assert(asprintf(&args, "--set train.grad_accum=4 --set output.dir=%s", one) > 0);
    cr_assert_eq(train_ranks(0, cfg, args, &out), 0, "%s", out);
    free(out);
    free(args);

    cr_assert(asprintf(&args, "--set train.grad_accum=2 --set output.dir=%s", two) > 0);
    cr_assert_eq(train_ranks(2, cfg, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "rank 0 of 2 (mpi)") && strstr(out, "rank 1 of 2 (mpi)"), "%s", out);
    cr_expect(!strstr(out, "LeakSanitizer"), "%s", out);
    free(out);
    free(args);
    expect_same_losses(one, two, 4);
    double diff = adapter_diff(one, two);
    cr_expect(diff <= 1e-4, "two ranks' adapter differs from one process's by %.3g of its largest value", diff);

    /* a run of 2 ranks continued by one process with the same global batch (and the other way round) */
    cr_assert(asprintf(&args, "--set train.grad_accum=2 --set train.max_steps=2 --set output.save_every=2 "
                              "--set output.dir=%s", mixed) > 0);
    cr_assert_eq(train_ranks(2, cfg, args, &out), 0, "%s", out);
    free(out);
    free(args);
    cr_assert(asprintf(&args, "--set train.grad_accum=4 --set output.save_every=2 --set output.dir=%s --resume auto",
                       mixed) > 0);
    cr_assert_eq(train_ranks(0, cfg, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "resumed from") && strstr(out, "checkpoint-2"), "%s", out);
    free(out);
    free(args);
    expect_same_losses(one, mixed, 4);
    diff = adapter_diff(one, mixed);
    cr_expect(diff <= 1e-4, "2 ranks then 1 process: the adapter differs by %.3g", diff);

    /* another global batch is refused by name */
    cr_assert(asprintf(&args, "--set train.grad_accum=1 --set train.max_steps=6 --set output.dir=%s --resume auto",
                       mixed) > 0);
    cr_assert_neq(train_ranks(2, cfg, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "micro_batch x grad_accum x ranks 2 x 4 x 1 vs 2 x 1 x 2"), "%s", out);
    free(out);
    free(args);

    qlt_remove_tree(dir);
    free(rows);
    free(cfg);
    free(one);
    free(two);
    free(mixed);
    free(dir);
}

/* `train --gpus 2` on the CPU path: both ranks refuse (data parallel on the CPU runs under mpirun), and the
 * launcher ends with one line naming a rank. */
Test(data_parallel, gpus_launcher_names_a_failed_rank, .timeout = QLT_TEST_TIMEOUT_S) {
    char *dir = test_tmpdir(), *rows = qlt_path_join(dir, "rows.jsonl"), *cfg = qlt_path_join(dir, "run.yaml");
    char *run = qlt_path_join(dir, "run");
    test_write_random_token_rows(rows, 3, 16);
    test_write_cpu_run_config(cfg, rows, "  max_steps: 2\n");
    char *out = NULL, *args = NULL;
    cr_assert(asprintf(&args, "--gpus 2 --set output.dir=%s", run) > 0);
    cr_assert_eq(train_ranks(0, cfg, args, &out), 1, "%s", out);
    cr_expect(strstr(out, "starting 2 ranks"), "%s", out);
    cr_expect(strstr(out, "WORLD_SIZE=2 on the cpu backend") && strstr(out, "mpirun"), "%s", out);
    cr_expect(strstr(out, "exited with status 1: the other ranks were stopped"), "%s", out);
    free(out);
    free(args);
    cr_assert(asprintf(&args, "--gpus two --set output.dir=%s", run) > 0);
    cr_assert_eq(train_ranks(0, cfg, args, &out), 1, "%s", out);
    cr_expect(strstr(out, "--gpus") && !strstr(out, "starting"), "%s", out);
    free(out);
    free(args);
    qlt_remove_tree(dir);
    free(rows);
    free(cfg);
    free(run);
    free(dir);
}
