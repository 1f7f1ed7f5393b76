/* cli_config.c: see cli_config.h. */
#include "cli/cli_config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"

int qlt_cli_load_config(int argc, char **argv, int allow_resume, qlt_cli_args *args, qlt_config *cfg) {
    memset(args, 0, sizeof *args);
    qlt_config_defaults(cfg);
    /* the file first, then every --set in order, whatever their position on the command line */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            args->help = 1;
            return 0;
        }
        if (strcmp(a, "--config") == 0 || strcmp(a, "--set") == 0 || strcmp(a, "--resume") == 0) {
            if (i + 1 >= argc) return qlt_fail("%s needs a value", a);
            if (strcmp(a, "--config") == 0) {
                if (args->config_path) return qlt_fail("--config given twice");
                args->config_path = argv[i + 1];
            } else if (strcmp(a, "--resume") == 0) {
                if (!allow_resume) return qlt_fail("--resume only applies to `qlora-train train`");
                args->resume = argv[i + 1];
            }
            i++;
            continue;
        }
        return qlt_fail("unknown option '%s' (options: --config FILE, --set section.key=value%s)", a,
                        allow_resume ? ", --resume auto|DIR" : "");
    }
    if (args->config_path) QLT_TRY(qlt_config_load_file(cfg, args->config_path));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--set") == 0) QLT_TRY(qlt_config_set(cfg, argv[i + 1]));
        if (strcmp(argv[i], "--set") == 0 || strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--resume") == 0) i++;
    }
    return qlt_config_validate(cfg);
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
