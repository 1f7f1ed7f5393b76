#!/usr/bin/env bash
# bench-vs-hf.sh: qlora-train and Hugging Face transformers + PEFT on the same shapes, in one run on the
# GPU machine; prints a side-by-side table last (tokens/s = median step, peak GiB).
#   scripts/bench-vs-hf.sh [BIN_DIR=carry/bin] [MODELS_DIR=carry/models]
# qlora-train: NF4 base (double quant), LoRA r 16 on all seven projections, random weights and tokens,
# the step captured as a CUDA graph; the last row also keeps every weight dequantized between steps
# (--dequant-cache, ~12.5 GiB more at 7B: no NF4 footprint any more, so it is not the issue's NF4 row).
# HF + PEFT: bf16 base (no quantization), SDPA, the same LoRA, torch AdamW. HF_QUANT=nf4: HF's QLoRA instead
# (the projections as bitsandbytes NF4 Linear4bit; needs the wheel `scripts/package-gpu.sh --bnb` puts in .whl/).
# Each run's SM clock and power are sampled every 100 ms (nvidia-smi): the table gives the median SM clock of
# its busy samples (power > 300 W) and the share of them throttled by the power cap (reason 0x4). Energy: the
# GPU's own counter (NVML) over each side's measured steps, in millijoules a token; "energy ratio" is HF+PEFT's
# energy a token over qlora-train's.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-carry/bin}
models=${2:-carry/models}
export LD_LIBRARY_PATH=$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
out=${OUT:-/tmp}/bench
mkdir -p "$out"
steps=${BENCH_STEPS:-8}
hf_quant=${HF_QUANT:-bf16}
if [ "$hf_quant" = nf4 ]; then
  . scripts/bnb-wheel.sh
  use_bnb_wheel || { echo "bench-vs-hf: HF_QUANT=nf4 needs bitsandbytes (.whl/: scripts/package-gpu.sh --bnb)" >&2; exit 2; }
fi
# name | config | micro_batch | seq | qlora-train extra flags | HF extra flags
cases=(
  "qwen2.5-1.5b mb4|qwen2.5-1.5b|4|2048|--cuda-graph|"
  "qwen2.5-7b mb1|qwen2.5-7b|1|2048|--cuda-graph|"
  "qwen2.5-7b mb4 (HF: checkpointing, it does not fit without)|qwen2.5-7b|4|2048|--cuda-graph|--grad-checkpoint"
  "qwen2.5-7b mb4, both checkpointing|qwen2.5-7b|4|2048|--cuda-graph --grad-checkpoint layer|--grad-checkpoint"
  "qwen2.5-7b mb1, qlora-train keeping the weights dequantized (train.dequant_cache_gib)|qwen2.5-7b|1|2048|--cuda-graph --dequant-cache 100|"
)
[ -n "${BENCH_CASES:-}" ] && IFS=';' read -r -a cases <<< "$BENCH_CASES"
# sample FILE: nvidia-smi's clock / power / throttle samples into FILE until stop_sample
sample() {
  nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv,noheader,nounits \
    -lms 100 > "$1" 2>/dev/null &
  sampler=$!
}
stop_sample() { kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null; }
# clock FILE: "median MHz (capped %)" over the busy samples, or "-"
clock() {
  python3 - "$1" <<'PY'
import statistics, sys
busy = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        mhz, watts, reasons = float(f[0]), float(f[1]), int(f[2], 16)
    except (ValueError, IndexError):
        continue
    if watts > 300:
        busy.append((mhz, reasons & 0x4))
if busy:
    capped = 100 * sum(1 for _, c in busy if c) / len(busy)
    print(f"{statistics.median(m for m, _ in busy):.0f} ({capped:.0f}%)")
else:
    print("-")
PY
}
printf "| shape | qlora-train tokens/s | peak GiB | SM MHz (power-capped) | mJ/token | HF+PEFT ($hf_quant base) tokens/s | peak GiB | SM MHz (power-capped) | mJ/token | speed-up | energy ratio |\n|---|---|---|---|---|---|---|---|---|---|---|\n" > "$out/table.md"
for c in "${cases[@]}"; do
  IFS='|' read -r name cfg mb seq qflags hflags <<< "$c"
  sample "$out/$cfg-$mb-qlt.smi"
  q=$("$bin/qlora-train" bench --model "$models/$cfg.json" --micro-batch "$mb" --seq "$seq" --steps "$steps" \
       --warmup 3 --json $qflags 2>"$out/$cfg-$mb-qlt.err" | tail -1)
  stop_sample
  echo "qlora-train $name: $q"
  mkdir -p "$out/hf-$cfg" && cp "$models/$cfg.json" "$out/hf-$cfg/config.json"
  sample "$out/$cfg-$mb-hf.smi"
  h=$(python3 scripts/hf_reference.py --config "$out/hf-$cfg/config.json" --out "$out/hf-$cfg" --steps $((steps + 3)) \
       --warmup 3 --batch "$mb" --seq "$seq" --time-only --quant "$hf_quant" $hflags 2>"$out/$cfg-$mb-hf.err" | tail -1)
  stop_sample
  echo "HF+PEFT $name: $h"
  python3 - "$name" "$q" "$h" "$(clock "$out/$cfg-$mb-qlt.smi")" "$(clock "$out/$cfg-$mb-hf.smi")" >> "$out/table.md" <<'PY'
import json, sys
name, q, h, qclk, hclk = sys.argv[1:6]
def get(s):
    try:
        return json.loads(s)
    except Exception:
        return None
a, b = get(q), get(h)
fa = lambda d, k, f: (f % d[k]) if d else "failed"
sp = f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}x" if a and b else "-"
mj = lambda d: f"{d['millijoules_per_token']:.2f}" if d and "millijoules_per_token" in d else "-"
er = (f"{b['millijoules_per_token'] / a['millijoules_per_token']:.2f}x" if a and b and "millijoules_per_token" in a
      and "millijoules_per_token" in b else "-")
print(f"| {name} | {fa(a, 'tokens_per_s', '%.0f')} | {fa(a, 'peak_gib', '%.1f')} | {qclk} | {mj(a)} | {fa(b, 'tokens_per_s', '%.0f')} | {fa(b, 'peak_gib', '%.1f')} | {hclk} | {mj(b)} | {sp} | {er} |")
PY
done
cat "$out/table.md"
