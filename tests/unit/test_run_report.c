/* test_run_report.c: what a training run reports (src/train/run_log.c and the files around it): the progress
 * line redrawn in place under a pseudo-terminal and the plain lines elsewhere, metrics.csv against
 * metrics.jsonl (also across a resume), the TensorBoard events file read back with its CRCs checked, and the
 * loss plots (`qlora-train plot`, output.dir/loss.png). The runs are a few CPU steps of the tiny-llama fixture. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <pty.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "common/fileutil.h"
#include "test_util.h"
#include "train/loss_plot.h"
#include "train/metrics_csv.h"
#include "train/run_log.h"
#include "train/run_metrics.h"
#include "train/tensorboard.h"

/* A config of `steps` CPU steps on the golden tokens of tiny-llama into dir/run (micro-batch 1 over its two
 * rows, evaluation on the same rows every 3 steps, a checkpoint every 3 steps); extra: more YAML lines. */
static char *write_run_config(const char *dir, int steps, const char *extra) {
    char *fixture = test_fixture_path("tiny-llama", NULL), *tokens = qlt_path_join(dir, "tokens.jsonl");
    int seq;
    test_write_golden_tokens("tiny-llama", tokens, NULL, &seq);
    char *text = NULL, *path = qlt_path_join(dir, "run.yaml");
    if (asprintf(&text,
                 "model: {path: %s, quant: none}\nlora: {init_from: %s/adapter-init}\n"
                 "data: {train: [%s], eval: [%s], format: tokens, seq_len: %d, packing: false, shuffle: false, "
                 "cache: false}\n"
                 "train: {device: cpu, micro_batch: 1, max_steps: %d, lr: 1.0e-2, schedule: linear, warmup_steps: 2, "
                 "eval_every: 3, log_every: 2}\n"
                 "output: {dir: %s/run, save_every: 3, tensorboard: true}\n%s",
                 fixture, fixture, tokens, tokens, seq, steps, dir, extra ? extra : "") < 0)
        abort();
    test_write_text(path, text);
    free(text);
    free(tokens);
    free(fixture);
    return path;
}

static char *read_text(const char *dir, const char *file) {
    char *path = qlt_path_join(dir, file), *text = NULL;
    cr_assert_eq(qlt_read_file(path, &text, NULL), 0, "%s: %s", path, qlt_error());
    free(path);
    return text;
}

static int count(const char *haystack, const char *needle) {
    int n = 0;
    for (const char *p = haystack; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Runs QLT_BINARY with argv under a pseudo-terminal 160 columns wide (no newline translation), returns what
 * it wrote there (stdout and stderr both go to the terminal) and its exit status in *status. */
static char *run_in_pty(char *const argv[], int *status) {
    struct termios tio;
    memset(&tio, 0, sizeof tio);
    tio.c_iflag = ICRNL;
    tio.c_oflag = 0; /* no OPOST: "\n" stays "\n", so every "\r" seen is the program's */
    tio.c_cflag = CS8 | CREAD;
    tio.c_lflag = 0;
    cfsetispeed(&tio, B38400);
    cfsetospeed(&tio, B38400);
    struct winsize ws = {.ws_row = 40, .ws_col = 160};
    int master;
    pid_t pid = forkpty(&master, NULL, &tio, &ws);
    cr_assert(pid >= 0, "forkpty failed");
    if (pid == 0) {
        execv(QLT_BINARY, argv);
        _exit(127);
    }
    size_t cap = 65536, n = 0;
    char *buf = qlt_xmalloc(cap);
    for (;;) {
        if (n + 4096 >= cap) buf = qlt_xrealloc(buf, cap *= 2);
        ssize_t got = read(master, buf + n, cap - n - 1);
        if (got <= 0) break; /* EIO once the child has exited and the terminal is closed */
        n += (size_t)got;
    }
    buf[n] = 0;
    close(master);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return buf;
}

/* On a terminal: the status line is redrawn in place ("\r", clear to the end of the line) with step/total, a
 * bar, the smoothed loss, lr, tokens/s, elapsed and ETA and the memory; eval results and checkpoint saves are
 * ordinary lines above it; the evaluations show their batches on it; no plain step lines. */
Test(run_report, tty_progress_redraws_in_place) {
    char *tmp = test_tmpdir(), *cfg = write_run_config(tmp, 6, NULL);
    char *argv[] = {"qlora-train", "train", "--config", cfg, NULL};
    int status;
    char *out = run_in_pty(argv, &status);
    cr_assert_eq(status, 0, "%s", out);
    cr_expect_geq(count(out, "\rstep "), 4, "the status line is redrawn in place: %s", out);
    cr_expect_geq(count(out, "\033[K"), 4, "%s", out);
    cr_expect(strstr(out, "\rstep 6/6 [########################] 100%  loss "), "%s", out);
    cr_expect(strstr(out, " ETA 00:00"), "the last redraw has ETA 00:00: %s", out);
    cr_expect(strstr(out, " tok/s  "), "%s", out);
    cr_expect(strstr(out, "  mem "), "the CPU backend's memory is shown: %s", out);
    cr_expect(strstr(out, " (peak "), "%s", out);
    cr_expect(strstr(out, " eval 2/2 batches"), "the evaluation's batches on the status line: %s", out);
    /* results as lines of their own: the status line cleared first */
    cr_expect(strstr(out, "\r\033[Kstep 3: eval_loss "), "%s", out);
    cr_expect(strstr(out, "\r\033[Kstep 3: checkpoint saved to "), "%s", out);
    cr_expect(strstr(out, "\r\033[Kstep 6: eval_loss "), "%s", out);
    cr_expect_null(strstr(out, "  grad_norm "), "no plain step lines on a terminal: %s", out);
    /* the status line ends with a newline before what follows it */
    cr_expect(strstr(out, "\nqlora-train: adapter written to "), "%s", out);
    char *run = qlt_path_join(tmp, "run");
    char *jsonl = read_text(run, "metrics.jsonl");
    cr_expect_eq(count(jsonl, "\"loss\""), 6, "%s", jsonl);
    free(jsonl);
    free(run);
    qlt_remove_tree(tmp);
    free(out);
    free(cfg);
    free(tmp);
}

/* Not a terminal: today's plain line every train.log_every steps (and at the last), no redraws, and a start
 * and an end line for each evaluation. */
Test(run_report, plain_lines_every_log_every) {
    char *tmp = test_tmpdir(), *cfg = write_run_config(tmp, 5, NULL), *args = NULL, *out = NULL;
    if (asprintf(&args, "train --config %s", cfg) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    cr_expect_null(strchr(out, '\r'), "no redraws off a terminal: %s", out);
    cr_expect_null(strstr(out, "\033["), "%s", out);
    for (int s = 1; s <= 5; s++) {
        char line[64];
        snprintf(line, sizeof line, "\nstep %d/5  loss ", s);
        int want = s % 2 == 0 || s == 5;
        cr_expect_eq(strstr(out, line) != NULL, want, "step %d: %s", s, out);
    }
    cr_expect(strstr(out, "  grad_norm "), "%s", out);
    cr_expect(strstr(out, " tokens/s\n"), "%s", out);
    cr_expect(strstr(out, "\nstep 3: evaluating 2 rows (2 batches)\n"), "%s", out);
    cr_expect(strstr(out, "\nstep 3: eval_loss "), "%s", out);
    cr_expect(strstr(out, "\nstep 3: checkpoint saved to "), "%s", out);
    cr_expect(strstr(out, "\nstep 5: evaluating 2 rows (2 batches)\n"), "the end-of-run evaluation: %s", out);
    cr_expect(strstr(out, "\nstep 5: eval_loss "), "%s", out);
    qlt_remove_tree(tmp);
    free(args);
    free(out);
    free(cfg);
    free(tmp);
}

/* The metrics.jsonl lines as parsed JSON, in file order. */
static cJSON **jsonl_lines(const char *run, int *n) {
    char *text = read_text(run, "metrics.jsonl");
    cJSON **lines = NULL;
    *n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        lines = qlt_xrealloc(lines, sizeof *lines * (size_t)(*n + 1));
        lines[*n] = cJSON_Parse(line);
        cr_assert(lines[*n], "metrics.jsonl line %d: %s", *n + 1, line);
        (*n)++;
    }
    free(text);
    return lines;
}

static double json_number(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "no number %s", key);
    return v->valuedouble;
}

/* metrics.csv holds the header and one row per metrics.jsonl line, in the same order, with equal values. */
static void expect_csv_matches_jsonl(const char *run, int want_steps, int want_evals) {
    int n;
    cJSON **lines = jsonl_lines(run, &n);
    char *csv = read_text(run, "metrics.csv");
    char *save = NULL, *row = strtok_r(csv, "\n", &save);
    cr_assert(row);
    cr_expect_str_eq(row, QLT_METRICS_CSV_HEADER);
    static const char *const columns[] = {"step", "loss", "grad_norm", "lr", "tokens", "tokens_per_s",
                                          "counted_tokens", "epoch", "step_time_s", "eval_loss", "eval_perplexity",
                                          "eval_tokens", "skipped_steps"};
    int steps = 0, evals = 0, i = 0;
    for (row = strtok_r(NULL, "\n", &save); row; row = strtok_r(NULL, "\n", &save), i++) {
        cr_assert_lt(i, n, "metrics.csv has more rows than metrics.jsonl has lines");
        int is_eval = cJSON_GetObjectItemCaseSensitive(lines[i], "eval_loss") != NULL;
        steps += !is_eval;
        evals += is_eval;
        char *field = row;
        for (int c = 0; c < 13; c++) {
            char *comma = strchr(field, ',');
            cr_assert(c == 12 || comma, "row %d has fewer than 13 fields: %s", i + 1, row);
            if (comma) *comma = 0;
            int wanted = c == 0 || (is_eval ? c >= 9 && c < 12 : c < 9 || c == 12);
            if (wanted) {
                cr_assert(field[0], "row %d: %s is empty", i + 1, columns[c]);
                double v = strtod(field, NULL);
                cr_expect_eq(v, json_number(lines[i], columns[c]), "row %d %s: %s vs %.17g", i + 1, columns[c],
                             field, json_number(lines[i], columns[c]));
            } else {
                cr_expect_eq(field[0], 0, "row %d: %s should be empty: %s", i + 1, columns[c], field);
            }
            if (comma) field = comma + 1;
        }
        if (!is_eval) cr_expect_eq(json_number(lines[i], "step"), steps, "train rows are steps 1, 2, ...");
    }
    cr_expect_eq(i, n, "metrics.csv rows %d, metrics.jsonl lines %d", i, n);
    cr_expect_eq(steps, want_steps);
    cr_expect_eq(evals, want_evals);
    for (int k = 0; k < n; k++) cJSON_Delete(lines[k]);
    free(lines);
    free(csv);
}

/* metrics.csv equals metrics.jsonl row for row; a run resumed from a checkpoint behind its last step drops
 * the later rows of both files and appends its own, so both again hold each step once. */
Test(run_report, metrics_csv_matches_jsonl_across_resume) {
    char *tmp = test_tmpdir(), *cfg = write_run_config(tmp, 5, NULL), *args = NULL, *out = NULL;
    char *run = qlt_path_join(tmp, "run");
    if (asprintf(&args, "train --config %s", cfg) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    expect_csv_matches_jsonl(run, 5, 2); /* evaluations after steps 3 and 5 */
    free(out);
    free(args);
    /* as if the run had been stopped after step 5 with its newest checkpoint at step 3 */
    char *final_dir = qlt_path_join(run, "final");
    qlt_remove_tree(final_dir);
    if (asprintf(&args, "train --config %s --resume auto", cfg) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    cr_expect(strstr(out, "resumed from"), "%s", out);
    expect_csv_matches_jsonl(run, 5, 2);
    char *csv = read_text(run, "metrics.csv");
    cr_expect_eq(count(csv, "step,loss"), 1, "one header: %s", csv);
    free(csv);
    qlt_remove_tree(tmp);
    free(final_dir);
    free(run);
    free(args);
    free(out);
    free(cfg);
    free(tmp);
}

/* qlt_run_log_truncate keeps the lines of steps <= step in both files' forms, and the CSV header. */
Test(run_report, truncate_keeps_earlier_steps) {
    char *tmp = test_tmpdir(), *jsonl = qlt_path_join(tmp, "m.jsonl"), *csv = qlt_path_join(tmp, "m.csv");
    test_write_text(jsonl, "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\": 1}\n{\"step\": 2, \"eval_loss\": 1}\n"
                           "{\"step\": 3, \"loss\": 0.5}\n");
    test_write_text(csv, QLT_METRICS_CSV_HEADER "\n1,2,,,,,,,,,,\n2,1,,,,,,,,,,\n2,,,,,,,,,1,2.7,3\n3,0.5,,,,,,,,,,\n");
    cr_assert_eq(qlt_run_log_truncate(jsonl, 2), 0, "%s", qlt_error());
    cr_assert_eq(qlt_run_log_truncate(csv, 2), 0, "%s", qlt_error());
    char *a = read_text(tmp, "m.jsonl"), *b = read_text(tmp, "m.csv");
    cr_expect_str_eq(a, "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\": 1}\n{\"step\": 2, \"eval_loss\": 1}\n");
    cr_expect_str_eq(b, QLT_METRICS_CSV_HEADER "\n1,2,,,,,,,,,,\n2,1,,,,,,,,,,\n2,,,,,,,,,1,2.7,3\n");
    char *absent = qlt_path_join(tmp, "absent");
    cr_expect_eq(qlt_run_log_truncate(absent, 2), 0, "a missing file is fine");
    free(absent);
    qlt_remove_tree(tmp);
    free(a);
    free(b);
    free(jsonl);
    free(csv);
    free(tmp);
}

/* CRC-32C's check value (RFC 3720's "123456789") and TFRecord's mask of it. */
Test(run_report, crc32c_known_answers) {
    cr_expect_eq(qlt_crc32c(0, "123456789", 9), 0xE3069283u);
    cr_expect_eq(qlt_crc32c(qlt_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u, "continued over two pieces");
    uint32_t c = 0xE3069283u;
    cr_expect_eq(qlt_tfrecord_masked_crc("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
    uint8_t zeros[32] = {0};
    cr_expect_eq(qlt_crc32c(0, zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4: 32 bytes of zeros */
}

/* A minimal protobuf reader for the test: the fields of one message. */
typedef struct pb_reader {
    const uint8_t *p, *end;
} pb_reader;

static uint64_t pb_varint(pb_reader *r) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        cr_assert(r->p < r->end, "truncated varint");
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    cr_assert_fail("varint too long");
    return 0;
}

/* The next field: its number and wire type; *data / *len for length-delimited ones, *bits for the rest. */
static int pb_next(pb_reader *r, int *field, int *wire, const uint8_t **data, uint64_t *len, uint64_t *bits) {
    if (r->p >= r->end) return 0;
    uint64_t key = pb_varint(r);
    *field = (int)(key >> 3);
    *wire = (int)(key & 7);
    *bits = 0;
    if (*wire == 0) {
        *bits = pb_varint(r);
    } else if (*wire == 1 || *wire == 5) {
        int n = *wire == 1 ? 8 : 4;
        cr_assert(r->p + n <= r->end, "truncated fixed field");
        for (int i = 0; i < n; i++) *bits |= (uint64_t)r->p[i] << (8 * i);
        r->p += n;
    } else if (*wire == 2) {
        *len = pb_varint(r);
        cr_assert(r->p + *len <= r->end, "truncated bytes field");
        *data = r->p;
        r->p += *len;
    } else {
        cr_assert_fail("unexpected wire type %d", *wire);
    }
    return 1;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

typedef struct tb_scalar {
    int64_t step;
    char tag[64];
    float value;
} tb_scalar;

/* Reads a TFRecord events file: checks both CRCs of every record, that the first event is the file_version
 * "brain.Event:2" one, that every event has a wall_time, and returns the scalars of the rest. */
static tb_scalar *read_events(const char *path, int *n_out) {
    char *text = NULL;
    size_t size = 0;
    cr_assert_eq(qlt_read_file(path, &text, &size), 0, "%s", qlt_error());
    const uint8_t *p = (const uint8_t *)text, *end = p + size;
    tb_scalar *out = NULL;
    int n = 0, events = 0;
    while (p < end) {
        cr_assert(p + 12 <= end, "truncated record header at %td", p - (const uint8_t *)text);
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)p[i] << (8 * i);
        cr_assert_eq(le32(p + 8), qlt_tfrecord_masked_crc(p, 8), "record %d: length CRC", events);
        cr_assert(p + 12 + len + 4 <= end, "record %d truncated", events);
        const uint8_t *data = p + 12;
        cr_assert_eq(le32(data + len), qlt_tfrecord_masked_crc(data, len), "record %d: data CRC", events);
        pb_reader ev = {data, data + len};
        int field, wire, has_wall = 0;
        const uint8_t *d;
        uint64_t l, bits;
        int64_t step = 0;
        char version[64] = "";
        const uint8_t *summary = NULL;
        uint64_t summary_len = 0;
        while (pb_next(&ev, &field, &wire, &d, &l, &bits)) {
            if (field == 1 && wire == 1) {
                double wall;
                memcpy(&wall, &bits, 8);
                cr_expect(wall > 1.7e9 && wall < 4e9, "wall_time %f is a Unix time", wall);
                has_wall = 1;
            } else if (field == 2 && wire == 0) {
                step = (int64_t)bits;
            } else if (field == 3 && wire == 2) {
                cr_assert_lt(l, sizeof version);
                memcpy(version, d, l);
                version[l] = 0;
            } else if (field == 5 && wire == 2) {
                summary = d;
                summary_len = l;
            } else {
                cr_assert_fail("event %d: unexpected field %d (wire %d)", events, field, wire);
            }
        }
        cr_expect(has_wall, "event %d has no wall_time", events);
        if (events == 0) {
            cr_expect_str_eq(version, "brain.Event:2", "the first event holds the file version");
            cr_expect_null(summary);
        } else {
            cr_assert(summary, "event %d has no summary", events);
            pb_reader sr = {summary, summary + summary_len};
            while (pb_next(&sr, &field, &wire, &d, &l, &bits)) {
                cr_assert(field == 1 && wire == 2, "Summary.value");
                pb_reader vr = {d, d + l};
                tb_scalar s = {.step = step};
                int has_value = 0;
                while (pb_next(&vr, &field, &wire, &d, &l, &bits)) {
                    if (field == 1 && wire == 2) {
                        cr_assert_lt(l, sizeof s.tag);
                        memcpy(s.tag, d, l);
                        s.tag[l] = 0;
                    } else if (field == 2 && wire == 5) {
                        uint32_t b32 = (uint32_t)bits;
                        memcpy(&s.value, &b32, 4);
                        has_value = 1;
                    } else {
                        cr_assert_fail("Summary.Value: unexpected field %d", field);
                    }
                }
                cr_assert(has_value && s.tag[0], "a scalar needs a tag and a simple_value");
                out = qlt_xrealloc(out, sizeof *out * (size_t)(n + 1));
                out[n++] = s;
            }
        }
        events++;
        p += 12 + len + 4;
    }
    free(text);
    *n_out = n;
    return out;
}

static char *find_events_file(const char *run) {
    DIR *d = opendir(run);
    cr_assert(d, "%s", run);
    char *found = NULL;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
            cr_assert_null(found, "one events file expected");
            found = qlt_path_join(run, e->d_name);
        }
    closedir(d);
    cr_assert(found, "no events.out.tfevents.* in %s", run);
    return found;
}

/* A float32 simple_value against metrics.jsonl's 9 significant digits of the same double: the float is within
 * 2^-24 (relative) of the double, the printed digits within 5e-9. */
#define FLOAT_OF_PRINTED 6.5e-8

static const tb_scalar *find_scalar(const tb_scalar *s, int n, const char *tag, int64_t step) {
    for (int i = 0; i < n; i++)
        if (s[i].step == step && strcmp(s[i].tag, tag) == 0) return &s[i];
    return NULL;
}

/* output.tensorboard: the events file holds, for every step, loss, lr, grad_norm and tokens/s, and for every
 * evaluation its loss, equal to metrics.jsonl's values as float32 holds them; both CRCs of every record are right. */
Test(run_report, tensorboard_events_read_back) {
    char *tmp = test_tmpdir(), *cfg = write_run_config(tmp, 4, NULL), *args = NULL, *out = NULL;
    char *run = qlt_path_join(tmp, "run");
    if (asprintf(&args, "train --config %s", cfg) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    free(args);
    free(out);
    /* a fresh run over it (output.overwrite) leaves its own events file only */
    if (asprintf(&args, "train --config %s --set output.overwrite=true", cfg) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    char *events = find_events_file(run);
    int n;
    tb_scalar *s = read_events(events, &n);
    cr_expect_eq(n, 4 * 4 + 2, "4 scalars a step, 2 evaluations (steps 3, 4)");
    int lines;
    cJSON **m = jsonl_lines(run, &lines);
    int checked = 0;
    for (int i = 0; i < lines; i++) {
        int64_t step = (int64_t)json_number(m[i], "step");
        if (cJSON_GetObjectItemCaseSensitive(m[i], "eval_loss")) {
            const tb_scalar *e = find_scalar(s, n, "eval/loss", step);
            cr_assert(e, "no eval/loss at step %lld", (long long)step);
            double want = json_number(m[i], "eval_loss");
            cr_expect(fabs(e->value - want) <= FLOAT_OF_PRINTED * fabs(want), "eval/loss %.9g vs %.9g", e->value, want);
            checked++;
            continue;
        }
        static const char *const tags[][2] = {{"train/loss", "loss"}, {"train/lr", "lr"},
                                              {"train/grad_norm", "grad_norm"},
                                              {"train/tokens_per_s", "tokens_per_s"}};
        for (int k = 0; k < 4; k++) {
            const tb_scalar *v = find_scalar(s, n, tags[k][0], step);
            cr_assert(v, "no %s at step %lld", tags[k][0], (long long)step);
            double want = json_number(m[i], tags[k][1]);
            if (k == 3) cr_expect(fabs(v->value - want) <= 0.05 + 1e-6 * want, "tokens/s %g vs %g", v->value, want);
            else cr_expect(fabs(v->value - want) <= FLOAT_OF_PRINTED * fabs(want), "%s step %lld: %.9g vs %.9g",
                           tags[k][0], (long long)step, v->value, want);
            checked++;
        }
    }
    cr_expect_eq(checked, n, "every scalar matched a metrics.jsonl value");
    for (int i = 0; i < lines; i++) cJSON_Delete(m[i]);
    free(m);
    free(s);
    free(events);
    qlt_remove_tree(tmp);
    free(run);
    free(args);
    free(out);
    free(cfg);
    free(tmp);
}

/* The PNG's signature and IHDR size. */
static void expect_png(const char *path, unsigned width, unsigned height) {
    char *data = NULL;
    size_t size = 0;
    cr_assert_eq(qlt_read_file(path, &data, &size), 0, "%s: %s", path, qlt_error());
    cr_assert_geq(size, 33);
    const uint8_t *p = (const uint8_t *)data;
    cr_expect_eq(memcmp(p, "\x89PNG\r\n\x1a\n", 8), 0, "PNG signature");
    cr_expect_eq(memcmp(p + 12, "IHDR", 4), 0, "first chunk IHDR");
    unsigned w = (unsigned)p[16] << 24 | p[17] << 16 | p[18] << 8 | p[19];
    unsigned h = (unsigned)p[20] << 24 | p[21] << 16 | p[22] << 8 | p[23];
    cr_expect_eq(w, width);
    cr_expect_eq(h, height);
    cr_expect_gt(size, 10000, "a figure with text and lines, not a blank page (%zu bytes)", size);
    free(data);
}

/* A run ends with output.dir/loss.png; `plot` draws two runs into a PNG and an SVG; bad arguments are
 * one-line errors. */
Test(run_report, plot_png_and_svg_of_two_runs) {
    if (!qlt_loss_plot_available()) {
        char *out = NULL;
        cr_expect_eq(test_run_cli(NULL, "plot /nonexistent", &out), 1);
        cr_expect(strstr(out, "no cairo"), "%s", out);
        free(out);
        return;
    }
    char *tmp = test_tmpdir(), *args = NULL, *out = NULL;
    char *dirs[2];
    for (int r = 0; r < 2; r++) {
        char sub[16];
        snprintf(sub, sizeof sub, "r%d", r);
        dirs[r] = qlt_path_join(tmp, sub);
        cr_assert_eq(qlt_mkdirs(dirs[r]), 0);
        char *cfg = write_run_config(dirs[r], 3 + r, NULL);
        if (asprintf(&args, "train --config %s --set train.lr=%s", cfg, r ? "5e-3" : "1e-2") < 0) abort();
        cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
        char *run = qlt_path_join(dirs[r], "run"), *png = qlt_path_join(run, "loss.png");
        expect_png(png, 1000, 720);
        char said[4200];
        snprintf(said, sizeof said, "qlora-train: loss plot in %s\n", png);
        cr_expect(strstr(out, said), "the run says where its plot is: %s", out);
        free(png);
        free(run);
        free(cfg);
        free(args);
        free(out);
    }
    char *png = qlt_path_join(tmp, "two.png"), *svg = qlt_path_join(tmp, "two.svg");
    if (asprintf(&args, "plot %s/run %s/run/ --out %s", dirs[0], dirs[1], png) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    expect_png(png, 1000, 720);
    free(args);
    free(out);
    if (asprintf(&args, "plot %s/run %s/run/metrics.jsonl --out %s", dirs[0], dirs[1], svg) < 0) abort();
    cr_assert_eq(test_run_cli(NULL, args, &out), 0, "%s", out);
    char *text = NULL;
    cr_assert_eq(qlt_read_file(svg, &text, NULL), 0);
    cr_expect_eq(strncmp(text, "<?xml", 5), 0, "%.40s", text);
    cr_expect(strstr(text, "<svg"), "an SVG document");
    cr_expect(strstr(text, "</svg>"), "a complete SVG document");
    free(text);
    free(args);
    free(out);
    /* errors: one line each, exit 1 */
    if (asprintf(&args, "plot %s/run --out %s/x.jpg", dirs[0], tmp) < 0) abort();
    cr_expect_eq(test_run_cli(NULL, args, &out), 1, "%s", out);
    cr_expect(strstr(out, "x.jpg: the plot's file name must end in .png or .svg"), "%s", out);
    cr_expect_eq(count(out, "\n"), 1, "one line: %s", out);
    free(args);
    free(out);
    if (asprintf(&args, "plot %s/nothing-here", tmp) < 0) abort();
    cr_expect_eq(test_run_cli(NULL, args, &out), 1, "%s", out);
    cr_expect(strstr(out, "nothing-here: no such file: give a run directory"), "%s", out);
    free(args);
    free(out);
    char *bad = qlt_path_join(tmp, "bad.jsonl");
    test_write_text(bad, "{\"step\": 1, \"loss\": 2}\nnot json\n");
    if (asprintf(&args, "plot %s --out %s", bad, png) < 0) abort();
    cr_expect_eq(test_run_cli(NULL, args, &out), 1, "%s", out);
    cr_expect(strstr(out, "bad.jsonl:2: not a metrics line"), "%s", out);
    free(args);
    free(out);
    free(bad);
    qlt_remove_tree(tmp);
    free(png);
    free(svg);
    free(dirs[0]);
    free(dirs[1]);
    free(tmp);
}

/* The reader behind plot: train and eval series from metrics.jsonl, blank lines skipped. */
Test(run_report, run_metrics_reads_series) {
    char *tmp = test_tmpdir(), *path = qlt_path_join(tmp, "metrics.jsonl");
    test_write_text(path, "{\"step\": 0, \"eval_loss\": 3.5, \"eval_perplexity\": 33, \"eval_tokens\": 4}\n"
                          "{\"step\": 1, \"loss\": 3, \"grad_norm\": 1.5, \"lr\": 1e-4, \"tokens_per_s\": 10}\n\n"
                          "{\"step\": 2, \"loss\": 2.5, \"grad_norm\": 1.25, \"lr\": 2e-4, \"tokens_per_s\": 12}\n"
                          "{\"step\": 2, \"eval_loss\": 2.75}\n");
    qlt_run_metrics m;
    cr_assert_eq(qlt_run_metrics_read(tmp, &m), 0, "%s", qlt_error());
    cr_expect_eq(m.n_steps, 2);
    cr_expect_eq(m.step[1], 2);
    cr_expect_eq(m.loss[0], 3.0);
    cr_expect_eq(m.lr[1], 2e-4);
    cr_expect_eq(m.grad_norm[1], 1.25);
    cr_expect_eq(m.n_evals, 2);
    cr_expect_eq(m.eval_step[0], 0);
    cr_expect_eq(m.eval_loss[1], 2.75);
    qlt_run_metrics_free(&m);
    qlt_remove_tree(tmp);
    free(path);
    free(tmp);
}
