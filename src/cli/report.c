/* report.c: the one way the CLI prints an error line. */
#include <stdio.h>

#include "cli/commands.h"
#include "common/error.h"

int qlt_cli_report_error(void) {
    const char *msg = qlt_error();
    fprintf(stderr, "qlora-train: error: %s\n", msg[0] ? msg : "unknown failure");
    return 1;
}
