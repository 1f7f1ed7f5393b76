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

char *test_tmpdir(void) {
    char *p = qlt_xstrdup("/tmp/qlt-test-XXXXXX");
    cr_assert(mkdtemp(p), "mkdtemp failed");
    return p;
}

int test_run_cli(const char *args, char **output) {
    char *cmd = NULL;
    if (asprintf(&cmd, "%s %s 2>&1", QLT_BINARY, args) < 0) abort();
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

void test_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}
