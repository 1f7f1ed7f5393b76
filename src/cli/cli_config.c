/* cli_config.c: see cli_config.h. */
#include "cli/cli_config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"

int qlt_cli_load_config(const char *cmd, int argc, char **argv, const qlt_cli_option *opts, qlt_cli_args *args,
                        qlt_config *cfg) {
    memset(args, 0, sizeof *args);
    qlt_config_defaults(cfg);
    /* the file first, then every --set in order, whatever their position on the command line */
    int i = 0, k;
    const char *v;
    while ((k = qlt_cli_next(cmd, opts, argc, argv, &i, &v)) != QLT_CLI_END) {
        if (k == QLT_CLI_ERROR) return -1;
        if (k == QLT_CLI_HELP) {
            args->help = 1;
            return 0;
        }
        if (k == QLT_CLI_POSITIONAL) {
            if (args->n_positional == 2) return qlt_fail("%s: unexpected argument '%s' (see `qlora-train %s --help`)", cmd, v, cmd);
            args->positional[args->n_positional++] = v;
            continue;
        }
        const char *name = opts[k].name;
        if (!strcmp(name, "--config")) {
            if (args->config_path) return qlt_fail("--config given twice");
            args->config_path = v;
        } else if (!strcmp(name, "--resume")) {
            args->resume = v;
        } else if (!strcmp(name, "--adapter")) {
            args->adapter = v;
        } else if (!strcmp(name, "--dry-run")) {
            args->dry_run = 1;
        }
    }
    if (args->config_path) QLT_TRY(qlt_config_load_file(cfg, args->config_path));
    QLT_TRY(qlt_config_apply_env(cfg));
    i = 0;
    while ((k = qlt_cli_next(cmd, opts, argc, argv, &i, &v)) >= 0 || k == QLT_CLI_POSITIONAL)
        if (k >= 0 && !strcmp(opts[k].name, "--set")) QLT_TRY(qlt_config_set(cfg, v));
    QLT_TRY(qlt_config_validate(cfg));
    qlt_config_apply_model_fallback(cfg);
    return 0;
}

int qlt_cli_parse_int(const char *flag, const char *v, int min, int max, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!v[0] || *end || errno || x < min || x > max)
        return qlt_fail("%s: expected an integer in [%d, %d], got '%s'", flag, min, max, v);
    *out = (int)x;
    return 0;
}

int qlt_cli_parse_size(const char *flag, const char *v, int64_t *out) {
    char *end;
    double x = strtod(v, &end);
    double unit = -1;
    if (end != v && x > 0 && x < 9e18) {
        if (!strcasecmp(end, "") || !strcasecmp(end, "B")) unit = 1;
        else if (!strcasecmp(end, "KB")) unit = 1e3;
        else if (!strcasecmp(end, "MB")) unit = 1e6;
        else if (!strcasecmp(end, "GB")) unit = 1e9;
    }
    if (unit < 0 || x * unit < 1 || x * unit > 9e18) return qlt_fail("%s '%s': give a size like 5GB or 500MB", flag, v);
    *out = (int64_t)(x * unit);
    return 0;
}
