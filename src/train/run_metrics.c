/* run_metrics.c: metrics.jsonl into arrays (see run_metrics.h), through cJSON. */
#include "train/run_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "common/fileutil.h"

static double number_or_nan(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void grow(void **p, int64_t n, size_t elem) {
    if ((n & (n - 1)) == 0) *p = qlt_xrealloc(*p, (size_t)(n ? 2 * n : 16) * elem); /* at 0, 1, 2, 4, ... */
}

static int add_line(qlt_run_metrics *m, const char *file, int line_no, const char *text, size_t len) {
    cJSON *o = cJSON_ParseWithLength(text, len);
    const cJSON *step = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    if (!cJSON_IsObject(o) || !cJSON_IsNumber(step)) {
        cJSON_Delete(o);
        return qlt_fail("%s:%d: not a metrics line (a JSON object with a \"step\" number): is this a qlora-train "
                        "run's metrics.jsonl?", file, line_no);
    }
    int64_t s = (int64_t)step->valuedouble;
    if (cJSON_GetObjectItemCaseSensitive(o, "loss")) {
        int64_t n = m->n_steps;
        grow((void **)&m->step, n, sizeof *m->step);
        grow((void **)&m->loss, n, sizeof *m->loss);
        grow((void **)&m->lr, n, sizeof *m->lr);
        grow((void **)&m->grad_norm, n, sizeof *m->grad_norm);
        grow((void **)&m->tokens_per_s, n, sizeof *m->tokens_per_s);
        m->step[n] = s;
        m->loss[n] = number_or_nan(o, "loss");
        m->lr[n] = number_or_nan(o, "lr");
        m->grad_norm[n] = number_or_nan(o, "grad_norm");
        m->tokens_per_s[n] = number_or_nan(o, "tokens_per_s");
        m->n_steps++;
    } else if (cJSON_GetObjectItemCaseSensitive(o, "eval_loss")) {
        int64_t n = m->n_evals;
        grow((void **)&m->eval_step, n, sizeof *m->eval_step);
        grow((void **)&m->eval_loss, n, sizeof *m->eval_loss);
        m->eval_step[n] = s;
        m->eval_loss[n] = number_or_nan(o, "eval_loss");
        m->n_evals++;
    }
    cJSON_Delete(o);
    return 0;
}

int qlt_run_metrics_read(const char *path, qlt_run_metrics *out) {
    memset(out, 0, sizeof *out);
    char *file = qlt_dir_exists(path) ? qlt_path_join(path, "metrics.jsonl") : qlt_xstrdup(path);
    char *text = NULL;
    size_t len = 0;
    if (!qlt_file_exists(file)) {
        qlt_fail("%s: no such file: give a run directory (output.dir of a qlora-train run) or its metrics.jsonl", file);
        free(file);
        return -1;
    }
    if (qlt_read_file(file, &text, &len) != 0) {
        free(file);
        return -1;
    }
    int rc = 0, line_no = 0;
    for (char *line = text; rc == 0 && line < text + len;) {
        char *end = memchr(line, '\n', (size_t)(text + len - line));
        size_t l = end ? (size_t)(end - line) : (size_t)(text + len - line);
        line_no++;
        size_t blank = 0;
        while (blank < l && (line[blank] == ' ' || line[blank] == '\t' || line[blank] == '\r')) blank++;
        if (blank < l) rc = add_line(out, file, line_no, line, l);
        line += l + 1;
    }
    free(text);
    free(file);
    if (rc != 0) qlt_run_metrics_free(out);
    return rc;
}

void qlt_run_metrics_free(qlt_run_metrics *m) {
    free(m->step);
    free(m->loss);
    free(m->lr);
    free(m->grad_norm);
    free(m->tokens_per_s);
    free(m->eval_step);
    free(m->eval_loss);
    memset(m, 0, sizeof *m);
}
