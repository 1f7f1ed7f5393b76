#!/usr/bin/env bash
# gpu-dp-check.sh: data parallel on a machine with 2 (or more) GPUs (docs/DISTRIBUTED.md); never run in CI.
#  1. Loss trajectory: the same 20-step run (random Qwen2.5-0.5B-shaped weights, NF4, LoRA dropout 0.1) on 1 GPU
#     (micro-batch 2 x grad_accum 4) and on 2 GPUs (`--gpus 2`, micro-batch 2 x grad_accum 2): the same global
#     batch of 8 rows, so the same rows, dropout seeds and token-mean loss each step; the sums run in another
#     order and bf16 activations round, so the losses must agree to 1e-2 relative at every step (bf16's
#     epsilon is 7.8e-3) and the gradient norms to 5e-2.
#  2. Throughput: Qwen2.5-7B shape, seq 2048, micro-batch 1 and 4, 1 GPU vs 2 GPUs, tokens/s of the whole job
#     (the median of steps 4..12 of metrics.jsonl, which counts the global batch's tokens); target >= 1.9x.
# NCCL_NVLS_ENABLE=0 (no NVLink multicast) for every run. libnccl.so.2 must be loadable: put the directory of
# PyPI's nvidia-nccl-cu13 wheel's lib/ (or PyTorch's) on LD_LIBRARY_PATH, or pass it as NCCL_LIB_DIR.
# Prints a table last; exit 1 when a trajectory differs or a run fails.
#   scripts/gpu-dp-check.sh [BIN_DIR=carry/bin] [MODELS_DIR=carry/models]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-carry/bin}
models=${2:-carry/models}
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$bin:${NCCL_LIB_DIR:+$NCCL_LIB_DIR:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
work=${OUT:-/tmp}/dp
mkdir -p "$work"
python3 - "$work/data.jsonl" <<'PY'
import json, random, sys
random.seed(5)
with open(sys.argv[1], "w") as f:
    for _ in range(400):
        f.write(json.dumps({"input_ids": [random.randrange(151936) for _ in range(2048)]}) + "\n")
PY
status=0

# run NAME MODEL SEQ MICRO ACCUM STEPS GPUS: one training run into $work/NAME (its log beside it)
run() {
  local name=$1 model=$2 seq=$3 micro=$4 accum=$5 steps=$6 gpus=$7
  cat > "$work/$name.yaml" <<YAML
model: {path: "random:$models/$model.json", quant: nf4}
lora: {r: 16, alpha: 32, dropout: 0.1}
data: {train: [$work/data.jsonl], format: tokens, seq_len: $seq, cache: false}
train: {device: cuda, micro_batch: $micro, grad_accum: $accum, max_steps: $steps, lr: 1.0e-3, schedule: cosine,
        warmup_steps: 2, deterministic: true, log_every: 5, dist_timeout_s: 300}
output: {dir: $work/$name, overwrite: true}
YAML
  local gpus_flag=""
  [ "$gpus" -gt 1 ] && gpus_flag="--gpus $gpus"
  "$bin/qlora-train" train --config "$work/$name.yaml" $gpus_flag > "$work/$name.log" 2>&1 ||
    { status=1; echo "$name failed:"; tail -5 "$work/$name.log"; }
}

run loss-1gpu qwen2.5-0.5b 256 2 4 20 1
run loss-2gpu qwen2.5-0.5b 256 2 2 20 2
python3 - "$work" <<'PY' || status=1
import json, sys
w = sys.argv[1]
def series(name, key):
    return [json.loads(l)[key] for l in open(f"{w}/{name}/metrics.jsonl") if '"loss"' in l]
ok = True
for key, tol in (("loss", 1e-2), ("grad_norm", 5e-2)):
    try:
        a, b = series("loss-1gpu", key), series("loss-2gpu", key)
        worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) == 20 else float("inf")
    except (OSError, ValueError, KeyError):
        worst = float("inf")
    ok &= worst <= tol
    print(f"| 2 GPUs vs 1 GPU, {key} over 20 steps (Qwen2.5-0.5B, global batch 8) | worst relative difference "
          f"{worst:.3e} | tolerance {tol:g} | {'pass' if worst <= tol else 'FAIL'} |")
sys.exit(0 if ok else 1)
PY

for micro in 1 4; do
  run tps-1gpu-mb$micro qwen2.5-7b 2048 "$micro" 1 12 1
  run tps-2gpu-mb$micro qwen2.5-7b 2048 "$micro" 1 12 2
done
python3 - "$work" <<'PY'
import json, statistics, sys
w = sys.argv[1]
def tps(name):
    try:
        v = [json.loads(l)["tokens_per_s"] for l in open(f"{w}/{name}/metrics.jsonl") if '"loss"' in l][3:12]
        return statistics.median(v) if v else 0.0
    except OSError:
        return 0.0
for micro in (1, 4):
    one, two = tps(f"tps-1gpu-mb{micro}"), tps(f"tps-2gpu-mb{micro}")
    speedup = two / one if one else 0.0
    print(f"| Qwen2.5-7B seq 2048 micro-batch {micro} tokens/s | 1 GPU {one:.0f} | 2 GPUs {two:.0f} | "
          f"speed-up {speedup:.2f}x (target >= 1.9x) |")
PY
exit $status
