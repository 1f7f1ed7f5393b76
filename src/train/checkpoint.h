/* checkpoint.h: checkpoints under output.dir/checkpoint-<step>/ and the final adapter in output.dir/final/:
 *   adapter_config.json + adapter_model.safetensors  the adapter in PEFT format (PeftModel.from_pretrained)
 *   optimizer.safetensors                           Adam moments "exp_avg" / "exp_avg_sq" [n_params] F32
 *   trainer_state.json                              step, epoch, data cursor, seed, tokens, shapes
 *   run_config.json                                 the effective configuration
 * Each directory is written under a temporary name and renamed, so it either is complete or does not
 * exist; an interrupted save never damages an earlier checkpoint. */
#ifndef QLT_CHECKPOINT_H
#define QLT_CHECKPOINT_H

#include "train/trainer.h"

int qlt_checkpoint_save(const qlt_trainer *t, const char *dir);
/* Restores adapter, moments and progress; errors if the checkpoint does not fit this run. */
int qlt_checkpoint_load(qlt_trainer *t, const char *dir);
/* The newest complete output_dir/checkpoint-<step> (heap path), or NULL when none. */
char *qlt_checkpoint_find_latest(const char *output_dir);
/* Removes the oldest checkpoints so that at most keep_last remain (keep_last <= 0: keep all). */
int qlt_checkpoint_prune(const char *output_dir, int keep_last);
/* Before a run that starts at step 0 writes anything into output_dir: an earlier run's checkpoint-<step>/
 * or final/ there would be overwritten, mixed with this run's and pruned with them, so this refuses
 * (naming them and what to do) unless overwrite, which deletes them first. */
int qlt_checkpoint_claim_output(const char *output_dir, int overwrite);
/* Writes only the adapter (PEFT format) atomically into dir. */
int qlt_adapter_save(const qlt_trainer *t, const char *dir);

#endif
