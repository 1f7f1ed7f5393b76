/* cli_options.c: see cli_options.h. */
#include "cli/cli_options.h"

#include <string.h>

#include "common/error.h"

int qlt_cli_option_find(const qlt_cli_option *opts, const char *name) {
    for (int k = 0; opts[k].name; k++)
        if (!strcmp(opts[k].name, name)) return k;
    return -1;
}

int qlt_cli_next(const char *cmd, const qlt_cli_option *opts, int argc, char **argv, int *i, const char **value) {
    *value = NULL;
    if (++*i >= argc) return QLT_CLI_END;
    const char *a = argv[*i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return QLT_CLI_HELP;
    if (a[0] != '-' || !a[1]) {
        *value = a;
        return QLT_CLI_POSITIONAL;
    }
    int k = qlt_cli_option_find(opts, a);
    if (k < 0) {
        qlt_fail("%s: unknown option '%s' (see `qlora-train %s --help` for its options)", cmd, a, cmd);
        return QLT_CLI_ERROR;
    }
    if (opts[k].arg) {
        if (*i + 1 >= argc) {
            qlt_fail("%s needs a value %s (see `qlora-train %s --help`)", a, opts[k].arg, cmd);
            return QLT_CLI_ERROR;
        }
        *value = argv[++*i];
    }
    return k;
}

void qlt_cli_print_options(FILE *out, const qlt_cli_option *opts) {
    fprintf(out, "\noptions:\n");
    for (int k = 0; opts[k].name; k++) {
        char head[64];
        snprintf(head, sizeof head, "%s%s%s", opts[k].name, opts[k].arg ? " " : "", opts[k].arg ? opts[k].arg : "");
        fprintf(out, "  %-26s %s", head, opts[k].help);
        if (opts[k].def) fprintf(out, " (default: %s)", opts[k].def);
        fputc('\n', out);
    }
    fprintf(out, "  %-26s %s\n", "--help, -h", "print this help and exit");
}
