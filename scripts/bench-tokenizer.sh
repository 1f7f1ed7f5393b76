#!/usr/bin/env bash
# bench-tokenizer.sh: single-thread tokenizing speed of qlora-train and of Hugging Face `tokenizers`, in
# one run, on the same text with the same tokenizer (both encode the "text" field of every JSONL line,
# texts already in memory, best of 3). Needs the built binary and `pip install tokenizers`.
#   scripts/bench-tokenizer.sh TEXT.jsonl TOKENIZER.json [QLORA_TRAIN_BINARY]
# e.g. (the text and tokenizers live in ../shared/assets; copy them along to a machine without it):
#   scripts/bench-tokenizer.sh ../shared/assets/text/sotu.jsonl ../shared/assets/tokenizers/qwen3/tokenizer.json
set -euo pipefail
cd "$(dirname "$0")/.."
text=${1:?usage: scripts/bench-tokenizer.sh TEXT.jsonl TOKENIZER.json [BINARY]}
tok=${2:?usage: scripts/bench-tokenizer.sh TEXT.jsonl TOKENIZER.json [BINARY]}
bin=${3:-build/qlora-train}
echo "# $(uname -n), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%FT%TZ)"
echo "# tokenizer: $tok"
"$bin" tokenize --tokenizer "$tok" --bench "$text" --threads 1 --repeat 3
python3 scripts/bench_tokenizer_hf.py --tokenizer "$tok" --text "$text" --repeat 3
