#!/usr/bin/env bash
# gpu-graph-check.sh: CUDA graph mode on the GPU machine.
#  1. The same 50-step run (random Qwen2.5-0.5B-shaped weights, NF4, LoRA dropout 0.1, micro-batch 2,
#     grad_accum 2) eagerly and with the step captured once and replayed: the loss trajectories agree
#     to 1e-3 relative at every step.
#     The same run captured with train.dequant_cache_gib (every weight kept dequantized; and a budget that
#     holds only some of them): the same trajectory, to the same tolerance.
#  2. The speed-up at micro-batch 1, seq 512 (launch overhead matters there): bench eager vs graph.
# Prints a table last; exit 1 if the trajectories differ.
#   scripts/gpu-graph-check.sh [BIN_DIR=carry/bin] [MODELS_DIR=carry/models]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-carry/bin}
models=${2:-carry/models}
export LD_LIBRARY_PATH=$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
work=${OUT:-/tmp}/graph
mkdir -p "$work"
python3 - "$work/data.jsonl" <<'PY'
import json, random, sys
random.seed(3)
with open(sys.argv[1], "w") as f:
    for _ in range(400):
        f.write(json.dumps({"input_ids": [random.randrange(151936) for _ in range(256)]}) + "\n")
PY
status=0
for mode in false true cache cachepart; do
  graph=true; cache=0
  [ "$mode" = false ] && graph=false
  [ "$mode" = cache ] && cache=100
  [ "$mode" = cachepart ] && cache=0.2
  cat > "$work/run-$mode.yaml" <<YAML
model: {path: "random:$models/qwen2.5-0.5b.json", quant: nf4}
lora: {r: 16, alpha: 32, dropout: 0.1}
data: {train: [$work/data.jsonl], format: tokens, seq_len: 256, cache: false}
train: {device: cuda, micro_batch: 2, grad_accum: 2, max_steps: 50, lr: 1.0e-3, schedule: cosine, warmup_steps: 5,
        cuda_graph: $graph, dequant_cache_gib: $cache, log_every: 10}
output: {dir: $work/run-$mode, save_every: 25, overwrite: true}
YAML
  "$bin/qlora-train" train --config "$work/run-$mode.yaml" > "$work/run-$mode.log" 2>&1 || { status=1; tail -5 "$work/run-$mode.log"; }
done
python3 - "$work" <<'PY' || status=1
import json, sys
w = sys.argv[1]
def losses(mode):
    return [json.loads(l)["loss"] for l in open(f"{w}/run-{mode}/metrics.jsonl") if '"loss"' in l]
a = losses("false")
failed = 0
for mode, what in (("true", "graph"), ("cache", "graph + every weight kept dequantized"),
                   ("cachepart", "graph + 0.2 GiB of weights kept dequantized")):
    b = losses(mode)
    worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) == 50 else float("inf")
    print(f"| {what} vs eager loss trajectory (50 steps) | worst relative difference {worst:.3e} | tolerance 1e-3 | "
          f"{'pass' if worst <= 1e-3 else 'FAIL'} |")
    failed += worst > 1e-3
sys.exit(1 if failed else 0)
PY
for mode in eager graph; do
  flag=""; [ "$mode" = graph ] && flag="--cuda-graph"
  "$bin/qlora-train" bench --model "$models/qwen2.5-0.5b.json" --micro-batch 1 --seq 512 --steps 20 --warmup 5 --json $flag \
    2>/dev/null | tail -1 > "$work/bench-$mode.json"
done
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
e, g = (json.load(open(f"{w}/bench-{m}.json")) for m in ("eager", "graph"))
print(f"| Qwen2.5-0.5B mb1 seq512 tokens/s | eager {e['tokens_per_s']:.0f} | graph {g['tokens_per_s']:.0f} | "
      f"speed-up {g['tokens_per_s'] / e['tokens_per_s']:.2f}x (target >= 1.10x) |")
PY
exit $status
