#!/usr/bin/env bash
# bench-vs-hf.sh: qlora-train and Hugging Face transformers + PEFT on the same shapes, in one run on the
# GPU machine; prints a side-by-side table last (tokens/s = median step, peak GiB).
#   scripts/bench-vs-hf.sh [BIN_DIR=carry/bin] [MODELS_DIR=carry/models]
# qlora-train: NF4 base (double quant), LoRA r 16 on all seven projections, random weights and tokens,
# the step captured as a CUDA graph.
# HF + PEFT: bf16 base (no quantization), SDPA, the same LoRA, torch AdamW.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-carry/bin}
models=${2:-carry/models}
export LD_LIBRARY_PATH=$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
out=${OUT:-/tmp}/bench
mkdir -p "$out"
steps=${BENCH_STEPS:-8}
# name | config | micro_batch | seq | qlora-train extra flags | HF extra flags
cases=(
  "qwen2.5-1.5b mb4|qwen2.5-1.5b|4|2048|--cuda-graph|"
  "qwen2.5-7b mb1|qwen2.5-7b|1|2048|--cuda-graph|"
  "qwen2.5-7b mb4 (HF: checkpointing, it does not fit without)|qwen2.5-7b|4|2048|--cuda-graph|--grad-checkpoint"
  "qwen2.5-7b mb4, both checkpointing|qwen2.5-7b|4|2048|--cuda-graph --grad-checkpoint layer|--grad-checkpoint"
)
[ -n "${BENCH_CASES:-}" ] && IFS=';' read -r -a cases <<< "$BENCH_CASES"
printf "| shape | qlora-train tokens/s | peak GiB | HF+PEFT tokens/s | peak GiB | speed-up |\n|---|---|---|---|---|---|\n" > "$out/table.md"
for c in "${cases[@]}"; do
  IFS='|' read -r name cfg mb seq qflags hflags <<< "$c"
  q=$("$bin/qlora-train" bench --model "$models/$cfg.json" --micro-batch "$mb" --seq "$seq" --steps "$steps" \
       --warmup 3 --json $qflags 2>"$out/$cfg-$mb-qlt.err" | tail -1)
  echo "qlora-train $name: $q"
  mkdir -p "$out/hf-$cfg" && cp "$models/$cfg.json" "$out/hf-$cfg/config.json"
  h=$(python3 scripts/hf_reference.py --config "$out/hf-$cfg/config.json" --out "$out/hf-$cfg" --steps $((steps + 3)) \
       --warmup 3 --batch "$mb" --seq "$seq" --time-only $hflags 2>"$out/$cfg-$mb-hf.err" | tail -1)
  echo "HF+PEFT $name: $h"
  python3 - "$name" "$q" "$h" >> "$out/table.md" <<'PY'
import json, sys
name, q, h = sys.argv[1], sys.argv[2], sys.argv[3]
def get(s):
    try:
        return json.loads(s)
    except Exception:
        return None
a, b = get(q), get(h)
fa = lambda d, k, f: (f % d[k]) if d else "failed"
sp = f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}x" if a and b else "-"
print(f"| {name} | {fa(a, 'tokens_per_s', '%.0f')} | {fa(a, 'peak_gib', '%.1f')} | {fa(b, 'tokens_per_s', '%.0f')} | {fa(b, 'peak_gib', '%.1f')} | {sp} |")
PY
done
cat "$out/table.md"
