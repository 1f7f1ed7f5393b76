/* cmd_train.c: `qlora-train train --config FILE [--set k=v ...] [--resume auto|DIR] [--dry-run]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_config.h"
#include "cli/commands.h"
#include "cli/dry_run.h"
#include "common/error.h"
#include "common/fileutil.h"
#include "dist/comm.h"
#include "dist/launcher.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/trainer.h"

const qlt_cli_option qlt_train_options[] = {
    QLT_CLI_OPT_CONFIG,
    QLT_CLI_OPT_SET,
    {"--resume", "auto|DIR", "none: a fresh run from step 0",
     "continue a run: auto = from the newest complete checkpoint in output.dir (a fresh run when there is none)"},
    {"--dry-run", NULL, "off",
     "print the resolved config (where each value came from), the data, the memory plan and one step's time; "
     "writes nothing"},
    {"--gpus", "N", "1: one process",
     "data parallel on N GPUs of this machine: one rank per GPU, the global batch is micro_batch x grad_accum x N "
     "(docs/DISTRIBUTED.md)"},
    {NULL, NULL, NULL, NULL},
};

static void usage(void) {
    printf("usage: qlora-train train --config FILE [--set section.key=value ...] [--resume auto|DIR] [--dry-run] "
           "[--gpus N]\n\n"
           "Fine-tunes LoRA adapters on the model of model.path with the data of data.train.\n"
           "Writes output.dir/metrics.jsonl and metrics.csv, output.dir/checkpoint-<step>/ every\n"
           "output.save_every steps, the final adapter (PEFT format) in output.dir/final/ and output.dir/loss.png\n"
           "(with output.tensorboard: true also a TensorBoard events file).\n"
           "--resume auto continues from the newest complete checkpoint in output.dir. A run from step 0\n"
           "refuses an output.dir that holds an earlier run's checkpoints or final/ unless output.overwrite.\n"
           "Ctrl-C (SIGINT) or SIGTERM: the step finishes, a checkpoint is written, exit 130 / 143.\n"
           "Every configuration key: docs/CONFIG.md.\n");
    qlt_cli_print_options(stdout, qlt_train_options);
}

/* --resume DIR, or --resume auto with a complete checkpoint in output.dir: the run continues one. */
static int resumes_from_checkpoint(const qlt_config *cfg, const char *resume) {
    if (!resume) return 0;
    if (strcmp(resume, "auto") != 0) return 1;
    char *latest = qlt_checkpoint_find_latest(cfg->output.dir);
    int found = latest != NULL;
    free(latest);
    return found;
}

/* --gpus N (0 when absent); -1 with the error when its value is bad. argv without it into rest (argc_rest). */
static int gpus_option(int argc, char **argv, char **rest, int *argc_rest) {
    int gpus = 0;
    *argc_rest = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && strcmp(argv[i], "--gpus") == 0 && i + 1 < argc) {
            if (qlt_cli_parse_int("--gpus", argv[i + 1], 1, 1024, &gpus) != 0) return -1;
            i++;
            continue;
        }
        rest[(*argc_rest)++] = argv[i];
    }
    return gpus;
}

int qlt_cmd_train(int argc, char **argv) {
    qlt_cli_args args;
    qlt_config cfg;
    if (qlt_cli_load_config("train", argc, argv, qlt_train_options, &args, &cfg) != 0) {
        qlt_config_free(&cfg);
        return qlt_cli_report_error();
    }
    if (args.help) {
        usage();
        qlt_config_free(&cfg);
        return 0;
    }
    if (args.n_positional > 0) {
        qlt_fail("train: unexpected argument '%s' (see `qlora-train train --help`)", args.positional[0]);
        qlt_config_free(&cfg);
        return qlt_cli_report_error();
    }
    if (!args.dry_run) { /* --gpus N: this command again as N ranks (src/dist/launcher.c), the config checked once */
        char **rest = qlt_xcalloc((size_t)argc + 2, sizeof *rest);
        int argc_rest = 0, gpus = gpus_option(argc, argv, rest + 1, &argc_rest);
        if (gpus > 1) {
            qlt_config_free(&cfg);
            rest[0] = (char *)"qlora-train";
            int status = qlt_launch_ranks(argc_rest + 1, rest, gpus, 30.0);
            free(rest);
            return status == 1 ? qlt_cli_report_error() : status;
        }
        free(rest);
        if (gpus < 0) {
            qlt_config_free(&cfg);
            return qlt_cli_report_error();
        }
    }
    if (args.dry_run) {
        int dry = qlt_cli_dry_run(&cfg, args.config_path);
        qlt_config_free(&cfg);
        return dry == 0 ? 0 : qlt_cli_report_error();
    }
    qlt_trainer t;
    int rc = qlt_trainer_init(&t, &cfg, QLT_TRAINER_TRAIN);
    if (rc == 0 && args.resume && strcmp(args.resume, "auto") == 0 &&
        qlt_run_already_finished(cfg.output.dir, t.total_steps)) {
        qlt_trainer_free(&t);
        qlt_config_free(&cfg);
        return 0;
    }
    /* data parallel: rank 0 alone writes into output.dir */
    if (rc == 0 && qlt_dp_is_root(&t) && !resumes_from_checkpoint(&cfg, args.resume)) /* before anything is written */
        rc = qlt_checkpoint_claim_output(cfg.output.dir, cfg.output.overwrite);
    if (rc == 0 && qlt_dp_is_root(&t)) {
        char *cfg_path = qlt_path_join(cfg.output.dir, "run_config.json");
        rc = qlt_mkdirs(cfg.output.dir);
        if (rc == 0) rc = qlt_config_write_json(&cfg, cfg_path);
        free(cfg_path);
    }
    /* data parallel: a rank 0 that cannot claim output.dir stops every rank, not only itself */
    if (t.dist_world > 1 && qlt_dp_any(&t, rc != 0) && rc == 0)
        rc = qlt_fail("rank %d: rank 0 could not set up output.dir %s (its error says why)", t.dist_rank,
                      cfg.output.dir);
    if (rc == 0) rc = qlt_trainer_run(&t, args.resume);
    if (rc != 0) qlt_cli_report_error();
    /* data parallel: a failed rank ends the whole job at once (the others may be waiting in a collective) */
    if (rc != 0 && t.comm) t.comm->abort(t.comm, "this rank failed (its error is above)");
    int status = rc == 0 ? qlt_run_exit_status(&t) : 1; /* 130 / 143: stopped by SIGINT / SIGTERM */
    qlt_trainer_free(&t);
    qlt_config_free(&cfg);
    return status;
}
