#!/usr/bin/env bash
# gpu-resume-check.sh: exact resume on the GPU. The demo config (NF4, dropout off, cosine schedule) runs 50
# steps straight with a checkpoint at step 25; a second output dir starts from a copy of that checkpoint and
# `--resume auto` runs steps 26-50; the losses of steps 26-50 and the final adapters must be bit-identical
# (train.deterministic: the default attention backward adds dQ with atomics, whose order varies). Eager, graph
# mode, and graph mode with every weight kept dequantized (train.dequant_cache_gib: each run's first step is
# eager, then the step is captured).   scripts/gpu-resume-check.sh [BIN_DIR=carry/bin]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-carry/bin}
export LD_LIBRARY_PATH=$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
work=${OUT:-/tmp}/resume
mkdir -p "$work"
status=0
for graph in false true cache; do
  cache=0
  [ "$graph" = cache ] && cache=100
  rm -rf "$work/straight-$graph" "$work/resumed-$graph"
  "$bin/qlora-train" train --config configs/demo.yaml --set output.dir="$work/straight-$graph" \
      --set train.cuda_graph=$([ "$graph" = false ] && echo false || echo true) --set train.deterministic=true \
      --set train.dequant_cache_gib=$cache > "$work/straight-$graph.log" 2>&1 || status=1
  mkdir -p "$work/resumed-$graph" && cp -r "$work/straight-$graph/checkpoint-25" "$work/resumed-$graph/"
  "$bin/qlora-train" train --config configs/demo.yaml --set output.dir="$work/resumed-$graph" \
      --set train.cuda_graph=$([ "$graph" = false ] && echo false || echo true) --set train.deterministic=true \
      --set train.dequant_cache_gib=$cache --resume auto > "$work/resumed-$graph.log" 2>&1 || status=1
  python3 - "$work" "$graph" <<'PY' || status=1
import filecmp, json, sys
w, g = sys.argv[1], sys.argv[2]
def losses(d):
    return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(f"{w}/{d}-{g}/metrics.jsonl") if '"loss"' in l}
a, b = losses("straight"), losses("resumed")
same = all(a[s] == b[s] for s in range(26, 51))
adapters = filecmp.cmp(f"{w}/straight-{g}/final/adapter_model.safetensors", f"{w}/resumed-{g}/final/adapter_model.safetensors", shallow=False)
ok = same and adapters
what = {"false": "cuda_graph false", "true": "cuda_graph true", "cache": "cuda_graph true, dequant cache"}[g]
print(f"| resume on the GPU ({what}) | steps 26-50 losses identical: {same} | final adapters identical: {adapters} | {'pass' if ok else 'FAIL'} |")
sys.exit(0 if ok else 1)
PY
done
exit $status
