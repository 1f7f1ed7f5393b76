/* cmd_plot.c: `qlora-train plot RUN_DIR... [--out FILE.png|.svg]`: the training and eval loss and the learning
 * rate of one or more runs against step, in one figure (src/train/loss_plot.c draws it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "common/error.h"
#include "train/loss_plot.h"

const qlt_cli_option qlt_plot_options[] = {
    {"--out", "FILE.png|FILE.svg", "loss.png", "the figure to write (PNG or SVG by its ending)"},
    {NULL, NULL, NULL, NULL},
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: qlora-train plot RUN_DIR... [--out FILE.png|FILE.svg]\n\n"
            "Draws the training loss, eval loss and learning rate against step of each run (its output.dir, or\n"
            "a metrics.jsonl) in one figure, one colour per run, in the current directory unless --out names\n"
            "another place. A training run also draws its own output.dir/loss.png when it ends.\n\n");
    qlt_cli_print_options(out, qlt_plot_options);
}

int qlt_cmd_plot(int argc, char **argv) {
    const char *out = "loss.png";
    const char **runs = qlt_xcalloc((size_t)argc, sizeof *runs);
    int n = 0, rc = 0;
    int i = 0;
    for (;;) {
        const char *value = NULL;
        const int k = qlt_cli_next("plot", qlt_plot_options, argc, argv, &i, &value);
        if (k == QLT_CLI_END) break;
        if (k == QLT_CLI_HELP) {
            usage(stdout);
            free(runs);
            return 0;
        }
        if (k == QLT_CLI_ERROR) {
            rc = -1;
            break;
        }
        if (k == QLT_CLI_POSITIONAL) runs[n++] = value;
        else out = value; /* --out */
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
