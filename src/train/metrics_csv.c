/* metrics_csv.c: metrics.csv rows (see metrics_csv.h). */
#include "train/metrics_csv.h"

#include <math.h>

#include "common/error.h"

FILE *qlt_metrics_csv_open(const char *path, int append) {
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f) {
        qlt_fail("%s: cannot write (check output.dir)", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    if (ftell(f) == 0) fprintf(f, "%s\n", QLT_METRICS_CSV_HEADER);
    fflush(f);
    return f;
}

void qlt_metrics_csv_step(FILE *f, const qlt_step_metrics *m) {
    double tokens_per_s = m->seconds > 0 ? (double)m->tokens / m->seconds : 0.0;
    fprintf(f, "%lld,%.9g,%.9g,%.9g,%lld,%.1f,%lld,%.4f,%.4f,,,,%lld\n", (long long)m->step, m->loss, m->grad_norm,
            m->lr, (long long)m->tokens_seen, tokens_per_s, (long long)m->counted, m->epoch, m->seconds,
            (long long)m->skipped_steps);
    fflush(f);
}

void qlt_metrics_csv_eval(FILE *f, int64_t step, double loss, int64_t counted) {
    fprintf(f, "%lld,,,,,,,,,%.9g,%.9g,%lld,\n", (long long)step, loss, exp(loss), (long long)counted);
    fflush(f);
}
