/* test_util.c: see test_util.h. */
#define _GNU_SOURCE
#include "test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/error.h"

char *test_fixture_path(const char *name, const char *file) {
    char *p = NULL;
    if (asprintf(&p, "%s/fixtures/%s%s%s", QLT_TEST_DATA, name, file ? "/" : "", file ? file : "") < 0) abort();
    return p;
}

int32_t *test_read_i32(const qlt_st_file *f, const char *name, int64_t *numel) {
    const qlt_st_tensor *t = qlt_st_find(f, name);
    cr_assert(t, "golden tensor %s missing", name);
    cr_assert_eq(t->dtype, QLT_DTYPE_I64);
    int32_t *out = qlt_xmalloc(sizeof(int32_t) * (size_t)t->numel);
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t v;
        memcpy(&v, (const char *)t->data + 8 * i, 8);
        out[i] = (int32_t)v;
    }
    if (numel) *numel = t->numel;
    return out;
}

float *test_read_f32(const qlt_st_file *f, const char *name, int64_t *numel) {
    const qlt_st_tensor *t = qlt_st_find(f, name);
    cr_assert(t, "golden tensor %s missing", name);
    float *out = qlt_xmalloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    qlt_st_read_f32(t, out);
    if (numel) *numel = t->numel;
    return out;
}

void test_golden_batch(const char *name, int32_t **ids, int32_t **labels, int *batch, int *seq) {
    char *gpath = test_fixture_path(name, "golden.safetensors");
    qlt_st_file g;
    cr_assert_eq(qlt_st_open(&g, gpath), 0, "%s", qlt_error());
    const qlt_st_tensor *ti = qlt_st_find(&g, "input_ids"), *tl = qlt_st_find(&g, "labels");
    cr_assert(ti && tl, "%s: golden input_ids / labels missing", gpath);
    cr_assert_eq(ti->ndim, 2, "%s: input_ids is not [batch, seq]", gpath);
    cr_assert_eq(tl->numel, ti->numel, "%s: labels and input_ids differ in size", gpath);
    if (ids) *ids = test_read_i32(&g, "input_ids", NULL);
    if (labels) *labels = test_read_i32(&g, "labels", NULL);
    if (batch) *batch = (int)ti->shape[0];
    if (seq) *seq = (int)ti->shape[1];
    qlt_st_close(&g);
    free(gpath);
}

void test_write_golden_tokens(const char *name, const char *path, int *batch, int *seq) {
    int32_t *ids, *labels;
    int b_n, s_n;
    test_golden_batch(name, &ids, &labels, &b_n, &s_n);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    for (int b = 0; b < b_n; b++) {
        fprintf(f, "{\"input_ids\": [");
        for (int s = 0; s < s_n; s++) fprintf(f, "%s%d", s ? ", " : "", ids[b * s_n + s]);
        fprintf(f, "], \"labels\": [");
        for (int s = 0; s < s_n; s++) fprintf(f, "%s%d", s ? ", " : "", labels[b * s_n + s]);
        fprintf(f, "]}\n");
    }
    fclose(f);
    free(ids);
    free(labels);
    if (batch) *batch = b_n;
    if (seq) *seq = s_n;
}

float test_noise(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

float *test_random_floats(unsigned *state, int64_t n, float scale) {
    float *x = qlt_xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = scale * test_noise(state);
    return x;
}

float *test_copy_floats(const float *x, int64_t n) {
    float *y = qlt_xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    memcpy(y, x, sizeof(float) * (size_t)n);
    return y;
}

double test_rel_err(const float *a, const float *ref, int64_t n) {
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (isnan(d)) return INFINITY;
        if (d > err) err = d;
        if (fabs((double)ref[i]) > scale) scale = fabs((double)ref[i]);
    }
    return scale > 0 ? err / scale : err;
}

void test_check_lora_grads(const qlt_lora *lora, const qlt_st_file *golden, double tol, const char *what) {
    char name[256], gname[300];
    int checked = 0, modules = 0;
    for (int l = 0; l < lora->n_layers; l++) {
        for (int p = 0; p < QLT_PROJ_COUNT; p++) {
            const qlt_lora_slot *s = &lora->slots[l][p];
            cr_assert(s->active, "%slayer %d projection %d has no adapter", what, l, p);
            if (!qlt_lora_owns_module(s, p)) continue; /* checked with its fused module's first projection */
            modules++;
            for (int which = 0; which < 2; which++) {
                qlt_lora_module_tensor_name(lora, name, sizeof name, l, p, which ? 'B' : 'A');
                snprintf(gname, sizeof gname, "grad.%s", name);
                int64_t numel;
                float *ref = test_read_f32(golden, gname, &numel);
                const float *got = lora->grads + (which ? qlt_lora_offset_b(lora, s) : s->offset_a);
                cr_assert_eq(numel, which ? s->module_out * lora->r : lora->r * s->in, "%s%s: numel %lld", what, gname,
                             (long long)numel);
                double err = test_rel_err(got, ref, numel);
                if (getenv("QLT_TEST_VERBOSE")) fprintf(stderr, "%s%s err %.3g\n", what, gname, err);
                cr_expect(err <= tol, "%s%s: max rel err %.3g", what, gname, err);
                free(ref);
                checked++;
            }
        }
    }
    cr_assert_eq(checked, modules * 2);
    cr_assert_eq(modules, lora->n_layers * (lora->fused ? 4 : QLT_PROJ_COUNT)); /* Phi-3: qkv, o, gate_up, down */
}

char *test_tmpdir(void) {
    char *p = qlt_xstrdup("/tmp/qlt-test-XXXXXX");
    cr_assert(mkdtemp(p), "mkdtemp failed");
    return p;
}

int test_run_cli(const char *cwd, const char *args, char **output) {
    char *cmd = NULL;
    if (asprintf(&cmd, "%s%s%s%s %s 2>&1", cwd ? "cd '" : "", cwd ? cwd : "", cwd ? "' && " : "", QLT_BINARY, args) < 0)
        abort();
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen failed");
    size_t cap = 4096, n = 0;
    char *buf = qlt_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (n + 1 >= cap) buf = qlt_xrealloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    int status = pclose(p);
    free(cmd);
    if (output) *output = buf;
    else free(buf);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

void test_write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len, "short write to %s", path);
    cr_assert_eq(fclose(f), 0, "cannot write %s", path);
}

void test_write_text(const char *path, const char *text) { test_write_bytes(path, text, strlen(text)); }

void test_write_cpu_run_config(const char *path, const char *train, const char *tail) {
    char *model = test_fixture_path("tiny-qwen3", NULL), *text = NULL;
    if (asprintf(&text,
                 "model:\n  path: %s\n  quant: none\n"
                 "lora:\n  r: 4\n  alpha: 8\n  dropout: 0.1\n"
                 "data:\n  train: [%s]\n  format: tokens\n  seq_len: 24\n  cache: false\n"
                 "train:\n  device: cpu\n  threads: 1\n  lr: 3e-2\n  schedule: constant\n  micro_batch: 2\n"
                 "  grad_accum: 2\n%s",
                 model, train, tail) < 0)
        abort();
    test_write_text(path, text);
    free(text);
    free(model);
}

void test_write_random_token_rows(const char *path, uint64_t seed, int rows) {
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    for (int row = 0; row < rows; row++) {
        fprintf(f, "{\"input_ids\": [");
        for (int i = 0; i < 24; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            fprintf(f, "%s%d", i ? ", " : "", (int)((seed >> 33) % 512));
        }
        fprintf(f, "]}\n");
    }
    fclose(f);
}
