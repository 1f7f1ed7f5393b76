/* checkpoint.h: checkpoints under output.dir/checkpoint-<step>/ and the final adapter in output.dir/final/:
 *   adapter_config.json + adapter_model.safetensors  the adapter in PEFT format (PeftModel.from_pretrained)
 *   optimizer.safetensors                           Adam moments "exp_avg" / "exp_avg_sq" [n_params] F32
 *   trainer_state.json                              step, epoch, data cursor, seed, tokens, shapes, the best
 *                                                   eval loss and early-stopping count, each file's size and
 *                                                   CRC-32, the base model / tokenizer / LoRA identity
 *                                                   (checkpoint_verify.h)
 *   run_config.json                                 the effective configuration
 * output.dir/best/ (output.save_best) is a checkpoint too; final/ holds the adapter and a trainer_state.json
 * (adapter_only: true) saying which step it is from. Each directory is written under a temporary name,
 * its files fsynced, renamed and its parent fsynced, so it either is complete or does not exist; an
 * interrupted save never damages an earlier checkpoint. */
#ifndef QLT_CHECKPOINT_H
#define QLT_CHECKPOINT_H

#include "train/trainer.h"

int qlt_checkpoint_save(const qlt_trainer *t, const char *dir);
/* Restores adapter, moments, progress and the best / early-stopping state; refuses (one line naming dir and
 * what differs) a checkpoint whose files' sizes or CRC-32s changed, or of another base model, tokenizer, LoRA
 * shape, data or batch shape. */
int qlt_checkpoint_load(qlt_trainer *t, const char *dir);
/* The newest complete output_dir/checkpoint-<step> (heap path), or NULL when none. */
char *qlt_checkpoint_find_latest(const char *output_dir);
/* Removes the oldest checkpoints so that at most keep_last remain (keep_last <= 0: keep all). */
int qlt_checkpoint_prune(const char *output_dir, int keep_last);
/* Before a run that starts at step 0 writes anything into output_dir: an earlier run's checkpoint-<step>/,
 * final/ or best/ there would be overwritten, mixed with this run's and pruned with them, so this refuses
 * (naming them and what to do) unless overwrite, which deletes them first. */
int qlt_checkpoint_claim_output(const char *output_dir, int overwrite);
/* Writes only the adapter (PEFT format) atomically into dir. */
int qlt_adapter_save(const qlt_trainer *t, const char *dir);

#endif
