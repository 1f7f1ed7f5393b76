/* cmd_plot.c: `qlora-train plot RUN_DIR... [--out FILE.png|.svg]`: the training and eval loss and the learning
 * rate of one or more runs against step, in one figure (src/train/loss_plot.c draws it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "common/error.h"
#include "train/loss_plot.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: qlora-train plot RUN_DIR... [--out FILE.png|FILE.svg]\n\n"
            "Draws the training loss, eval loss and learning rate against step of each run (its output.dir, or\n"
            "a metrics.jsonl) in one figure, one colour per run. Default --out: loss.png (in the current\n"
            "directory). A training run also draws its own output.dir/loss.png when it ends.\n");
}

int qlt_cmd_plot(int argc, char **argv) {
    const char *out = "loss.png";
    const char **runs = qlt_xcalloc((size_t)argc, sizeof *runs);
    int n = 0, rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            free(runs);
            return 0;
        } else if (strcmp(argv[i], "--out") == 0) {
            if (i + 1 >= argc) rc = qlt_fail("plot: --out needs a file name ending in .png or .svg");
            else out = argv[++i];
        } else if (strncmp(argv[i], "--", 2) == 0) {
            rc = qlt_fail("plot: unknown option '%s' (options: --out FILE.png|FILE.svg)", argv[i]);
        } else {
            runs[n++] = argv[i];
        }
    }
    if (rc == 0 && n == 0) {
        usage(stderr);
        rc = qlt_fail("plot: name at least one run directory (a training run's output.dir)");
    }
    if (rc == 0) rc = qlt_loss_plot(runs, n, out); /* without cairo: says so, in one line */
    free(runs);
    if (rc != 0) return qlt_cli_report_error();
    fprintf(stderr, "qlora-train: plot of %d run%s written to %s\n", n, n == 1 ? "" : "s", out);
    return 0;
}
