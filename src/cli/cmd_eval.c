/* cmd_eval.c: `qlora-train eval --config FILE [--set k=v ...] [ADAPTER_DIR | --adapter DIR]`: mean loss and
 * perplexity of the model (with the adapter of ADAPTER_DIR / --adapter, else lora.init_from, if set) over the
 * evaluation data training uses (data.eval, else the data.eval_split rows of data.train, else all of
 * data.train), as one JSON line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli_config.h"
#include "cli/commands.h"
#include "common/error.h"
#include "train/eval_data.h"
#include "train/trainer.h"

const qlt_cli_option qlt_eval_options[] = {
    QLT_CLI_OPT_CONFIG,
    QLT_CLI_OPT_SET,
    {"--adapter", "DIR", "lora.init_from (\"\": the base model alone)",
     "the PEFT adapter to evaluate (e.g. runs/demo/final); also accepted as a plain argument"},
    {NULL, NULL, NULL, NULL},
};

static void usage(void) {
    printf("usage: qlora-train eval --config FILE [--set section.key=value ...] [ADAPTER_DIR | --adapter DIR]\n\n"
           "Prints {\"loss\", \"perplexity\", \"tokens\", \"rows\", \"adapter\"} of the model (+ the adapter;\n"
           "\"adapter\" says whether one was loaded) over the data training evaluates on: data.eval, else the\n"
           "data.eval_split rows held out of data.train, else all of data.train. Progress goes to stderr.\n");
    qlt_cli_print_options(stdout, qlt_eval_options);
}

/* trainer.h eval_progress for the eval command: train/eval_data.c's lines when there are more than 4 batches */
static void eval_progress_lines(void *ctx, int64_t done, int64_t total) {
    qlt_trainer *t = ctx;
    if (total > 4) qlt_eval_progress(t->be, t->scalars, done, total);
}

int qlt_cmd_eval(int argc, char **argv) {
    qlt_cli_args args;
    qlt_config cfg;
    if (qlt_cli_load_config("eval", argc, argv, qlt_eval_options, &args, &cfg) != 0) {
        qlt_config_free(&cfg);
        return qlt_cli_report_error();
    }
    if (args.help) {
        usage();
        qlt_config_free(&cfg);
        return 0;
    }
    const char *adapter = args.adapter;
    if (args.n_positional > 1 || (args.n_positional == 1 && adapter)) {
        qlt_fail("eval takes one adapter: ADAPTER_DIR or --adapter DIR, not both (got '%s')",
                 args.positional[args.n_positional - 1]);
        qlt_config_free(&cfg);
        return qlt_cli_report_error();
    }
    if (args.n_positional == 1) adapter = args.positional[0];
    if (adapter) { /* the adapter to score is lora.init_from's slot */
        free(cfg.lora.init_from);
        cfg.lora.init_from = qlt_xstrdup(adapter);
    }
    qlt_trainer t;
    int rc = qlt_trainer_init(&t, &cfg, QLT_TRAINER_EVAL);
    double loss = 0;
    int64_t counted = 0;
    if (rc == 0) {
        t.eval_progress = eval_progress_lines;
        t.eval_progress_ctx = &t;
        rc = qlt_trainer_evaluate(&t, &t.eval, &loss, &counted);
    }
    if (rc == 0)
        printf("{\"loss\": %.9g, \"perplexity\": %.9g, \"tokens\": %lld, \"rows\": %lld, \"adapter\": %s}\n", loss,
               exp(loss), (long long)counted, (long long)t.eval.n_rows, t.has_lora ? "true" : "false");
    else
        qlt_cli_report_error();
    qlt_trainer_free(&t);
    qlt_config_free(&cfg);
    return rc == 0 ? 0 : 1;
}
