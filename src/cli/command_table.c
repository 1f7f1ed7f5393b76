/* command_table.c: the list of `qlora-train` commands (one line per command, kept in help order). */
#include <stddef.h>

#include "cli/commands.h"

const qlt_command qlt_commands[] = {
    {"train", "fine-tune LoRA adapters (--config FILE, --resume auto|DIR, --dry-run)", qlt_cmd_train, qlt_train_options},
    {"eval", "loss and perplexity of a model (+ adapter) on a dataset", qlt_cmd_eval, qlt_eval_options},
    {"generate", "text from the model (+ adapter) for a prompt: greedy or sampled, KV cache, streamed", qlt_cmd_generate, qlt_generate_options},
    {"inspect", "architecture, tensors, bytes and NF4 footprint of a model directory", qlt_cmd_inspect, qlt_inspect_options},
    {"tokenize", "encode text to token ids or decode ids (tokenizer.json), or benchmark the tokenizer", qlt_cmd_tokenize, qlt_tokenize_options},
    {"bench", "tokens/s, memory, MFU and time breakdown on a random-weight model of a config.json", qlt_cmd_bench, qlt_bench_options},
    {"plot", "training and eval loss and the learning rate of runs against step: a PNG or SVG figure", qlt_cmd_plot, qlt_plot_options},
    {"merge", "fold a trained adapter into its base model: a Hugging Face model directory or a GGUF file", qlt_cmd_merge, qlt_merge_options},
    {"sweep", "a grid / random search over config keys: one run per value set, summary.md and summary.csv", qlt_cmd_sweep, qlt_sweep_cli_options},
    {"quantize", "write a bitsandbytes 4-bit NF4 checkpoint of a model", qlt_cmd_quantize, qlt_quantize_options},
    {NULL, NULL, NULL, NULL},
};
