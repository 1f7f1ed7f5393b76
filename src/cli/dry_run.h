/* dry_run.h: `qlora-train train --dry-run`: everything a run would do before its first step, said instead of
 * done: the resolved configuration with where each value came from, the data, the memory plan and one step's
 * time. Nothing is written to output.dir (the dataset cache is off for it). */
#ifndef QLT_DRY_RUN_H
#define QLT_DRY_RUN_H

#include "config/config.h"

/* Prints the report to stdout (the trainer's own progress lines go to stderr as in a run). config_path: the
 * --config file the FILE:LINE origins refer to (NULL: none). cfg->data.cache is turned off. 0, or -1 with
 * qlt_fail. */
int qlt_cli_dry_run(qlt_config *cfg, const char *config_path);

#endif
