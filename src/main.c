/* main.c: `qlora-train <command> [args]`: finds the command in the table and runs it. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

#define QLT_VERSION "0.1.0"

static void print_usage(FILE *out) {
    fprintf(out, "qlora-train %s: QLoRA fine-tuning of Hugging Face LLMs in C and CUDA\n\n", QLT_VERSION);
    fprintf(out, "usage: qlora-train <command> [options]\n\ncommands:\n");
    for (const qlt_command *c = qlt_commands; c->name; c++) fprintf(out, "  %-10s %s\n", c->name, c->summary);
    fprintf(out, "  %-10s %s\n", "version", "print the version");
    fprintf(out, "\n`qlora-train <command> --help` describes each command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("qlora-train %s\n", QLT_VERSION);
        return 0;
    }
    for (const qlt_command *c = qlt_commands; c->name; c++) {
        if (strcmp(argv[1], c->name) == 0) return c->run(argc - 1, argv + 1);
    }
    fprintf(stderr, "qlora-train: error: unknown command '%s' (run `qlora-train --help` for the list)\n", argv[1]);
    return 2;
}
