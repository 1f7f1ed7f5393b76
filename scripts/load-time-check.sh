#!/usr/bin/env bash
# load-time-check.sh: time from start to the end of the first training step for a real 7B bf16
# safetensors model already in the page cache (target <= 15 s), on the GPU machine. transformers writes a
# Qwen2.5-7B-shaped model with random weights (sharded safetensors, bf16); the files are read once so they
# are in the page cache; then `qlora-train train` runs one step (NF4 quantization on the GPU, streamed
# tensor by tensor) and the wall time is printed with the trainer's own "model loaded" line.
#   scripts/load-time-check.sh [BIN_DIR=carry/bin] [CONFIG=carry/models/qwen2.5-7b.json]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-carry/bin}
cfg=${2:-carry/models/qwen2.5-7b.json}
export LD_LIBRARY_PATH=$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
work=${WORK:-/tmp/load7b}
mkdir -p "$work/model"
cp "$cfg" "$work/model/config.json"
python3 - "$work/model" <<'PY'
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
cfg = AutoConfig.from_pretrained(sys.argv[1])
with torch.device("cuda"):
    m = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
m.save_pretrained(sys.argv[1], safe_serialization=True)
PY
du -sh "$work/model"
cat "$work"/model/*.safetensors > /dev/null  # into the page cache
python3 -c "
import json, random
random.seed(1)
with open('$work/data.jsonl', 'w') as f:
    for _ in range(4):
        f.write(json.dumps({'input_ids': [random.randrange(151936) for _ in range(2048)]}) + '\n')
"
cat > "$work/run.yaml" <<YAML
model: {path: $work/model, quant: nf4}
data: {train: [$work/data.jsonl], format: tokens, seq_len: 2048, cache: false}
train: {device: cuda, micro_batch: 1, max_steps: 1}
output: {dir: $work/out, overwrite: true}
YAML
start=$(date +%s.%N)
"$bin/qlora-train" train --config "$work/run.yaml" 2>&1 | grep -E "loaded|step 1/|error"
end=$(date +%s.%N)
python3 -c "print(f'| Qwen2.5-7B bf16 safetensors (page cache) -> NF4 on the GPU -> first step done | {$end - $start:.2f} s | target <= 15 s |')"
