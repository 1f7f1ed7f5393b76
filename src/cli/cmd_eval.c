/* cmd_eval.c: `qlora-train eval --config FILE [--set k=v ...]`: mean loss and perplexity of the model
 * (with the adapter of lora.init_from, if set) over data.eval (or data.train), as one JSON line. */
#include <math.h>
#include <stdio.h>

#include "cli/cli_config.h"
#include "cli/commands.h"
#include "common/error.h"
#include "train/trainer.h"

int qlt_cmd_eval(int argc, char **argv) {
    qlt_cli_args args;
    qlt_config cfg;
    if (qlt_cli_load_config(argc, argv, 0, &args, &cfg) != 0) {
        qlt_config_free(&cfg);
        return qlt_cli_report_error();
    }
    if (args.help) {
        printf("usage: qlora-train eval --config FILE [--set section.key=value ...]\n\n"
               "Prints {\"loss\", \"perplexity\", \"tokens\", \"rows\", \"adapter\"} of the model (+ lora.init_from\n"
               "adapter; \"adapter\" says whether one was loaded) over data.eval, or all of data.train when\n"
               "data.eval is empty (data.eval_split does not apply here).\n");
        qlt_config_free(&cfg);
        return 0;
    }
    qlt_trainer t;
    int rc = qlt_trainer_init(&t, &cfg, QLT_TRAINER_EVAL);
    double loss = 0;
    int64_t counted = 0;
    if (rc == 0) rc = qlt_trainer_evaluate(&t, &t.eval, &loss, &counted);
    if (rc == 0)
        printf("{\"loss\": %.9g, \"perplexity\": %.9g, \"tokens\": %lld, \"rows\": %lld, \"adapter\": %s}\n", loss,
               exp(loss), (long long)counted, (long long)t.eval.n_rows, t.has_lora ? "true" : "false");
    else
        qlt_cli_report_error();
    qlt_trainer_free(&t);
    qlt_config_free(&cfg);
    return rc == 0 ? 0 : 1;
}
