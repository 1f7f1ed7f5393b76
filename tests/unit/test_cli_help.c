/* test_cli_help.c: every command's --help exits 0 and lists each option of the command's option table (the
 * table its parser reads) with its default; an option not in the table is refused. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "test_cli_util.h"

Test(cli_help, every_command_lists_every_option) {
    int commands = 0;
    for (const qlt_command *c = qlt_commands; c->name; c++, commands++) {
        cr_assert_not_null(c->options, "%s has no option table", c->name);
        char *args = NULL, *out = NULL;
        if (asprintf(&args, "%s --help", c->name) < 0) abort();
        cr_assert_eq(cli_run(args, &out), 0, "%s: %s", args, out);
        int n = 0;
        for (const qlt_cli_option *o = c->options; o->name; o++, n++) {
            char head[128];
            snprintf(head, sizeof head, "  %s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
            cr_expect(strstr(out, head), "`%s` does not list %s: %s", args, head, out);
            if (o->def) {
                char def[256];
                snprintf(def, sizeof def, "(default: %s)", o->def);
                cr_expect(strstr(out, def), "`%s` does not give %s's default %s", args, o->name, def);
            }
        }
        cr_expect_gt(n, 0, "%s: an empty option table", c->name);
        free(args);
        free(out);
        if (asprintf(&args, "%s --no-such-option x", c->name) < 0) abort();
        int rc = cli_run(args, &out);
        cr_expect(rc != 0 && strstr(out, "--no-such-option"), "`%s` must be refused naming the option: %d %s", args,
                  rc, out);
        free(args);
        free(out);
    }
    cr_expect_eq(commands, 10);
}
