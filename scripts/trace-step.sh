#!/usr/bin/env bash
# trace-step.sh: on the GPU machine, the timeline of one replayed (CUDA graph) or eager training step, kernel
# by kernel, as the GPU ran it: clocks and caches as in a real run (ncu serializes kernels and flushes
# caches; Nsight Systems is not installed there). Prints the step's span, the kernels' busy time, the gaps
# between them by neighbouring pair, and the time per kernel name; the raw TSV stays in $OUT (or /tmp).
#   scripts/trace-step.sh BIN_DIR MODEL_JSON MICRO_BATCH [graph|eager (default graph)] [TOP=30]
#   (BIN_DIR: carry/bin on that machine)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-carry/bin}
model=$2
mb=$3
mode=${4:-graph}
top=${5:-30}
export LD_LIBRARY_PATH=$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if [ ! -f "$bin/libkernel_trace.so" ]; then
  echo "trace-step: $bin/libkernel_trace.so not found: build it with scripts/package-gpu.sh (needs CUPTI's headers)" >&2
  exit 2
fi
tsv=${OUT:-/tmp}/trace-$(basename "$model" .json)-mb$mb-$mode.tsv
graph_flag=--cuda-graph
[ "$mode" = eager ] && graph_flag=
QLT_TRACE_OUT=$tsv LD_PRELOAD=$PWD/$bin/libkernel_trace.so "$bin/qlora-train" bench --model "$model" \
  --micro-batch "$mb" --seq 2048 --steps 3 --warmup 2 $graph_flag | grep tokens/s
if [ ! -s "$tsv" ]; then
  echo "trace-step: no trace written to $tsv (CUPTI could not be enabled?)" >&2
  exit 1
fi
python3 - "$tsv" "$top" <<'PY'
import collections, re, sys
path, top = sys.argv[1], int(sys.argv[2])
rows = []
for line in open(path):
    start, end, kind, node, name = line.rstrip("\n").split("\t")
    rows.append((int(start), int(end), kind, name))
# the last full step: after the second-to-last AdamW up to and including the last
ends = [i for i, r in enumerate(rows) if "adamw_kernel" in r[3]]
if len(ends) < 2:
    sys.exit(f"{path}: expected at least two AdamW launches, found {len(ends)}")
step = rows[ends[-2] + 1:ends[-1] + 1]
def short(name):
    if name.startswith("nvjet"):
        return "GEMM (cuBLAS)"
    m = re.match(r"_ZN?(\d+)", name)  # CUPTI gives mangled names: keep the function's own
    if m:
        return name[m.end():m.end() + int(m.group(1))]
    return name.split("(")[0][:60]
span = (step[-1][1] - step[0][0]) / 1e6
busy = sum(r[1] - r[0] for r in step) / 1e6
kinds = collections.Counter(r[2] for r in step)
print(f"step span {span:.2f} ms, busy {busy:.2f} ms: {kinds['K']} kernels, {kinds['C']} copies, {kinds['S']} memsets")
gaps = collections.defaultdict(lambda: [0.0, 0])
for a, b in zip(step, step[1:]):
    key = f"{short(a[3])} -> {short(b[3])}"
    gaps[key][0] += (b[0] - a[1]) / 1e3
    gaps[key][1] += 1
print(f"gaps {sum(v[0] for v in gaps.values()) / 1e3:.2f} ms; largest by neighbouring pair:")
print("| ms | count | us each | pair |\n|---|---|---|---|")
for k, (us, n) in sorted(gaps.items(), key=lambda kv: -kv[1][0])[:8]:
    print(f"| {us / 1e3:.2f} | {n} | {us / n:.2f} | {k} |")
per = collections.defaultdict(lambda: [0.0, 0])
for r in step:
    per[short(r[3])][0] += (r[1] - r[0]) / 1e6
    per[short(r[3])][1] += 1
print("| ms | % | count | kernel |\n|---|---|---|---|")
for k, (ms, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[:top]:
    print(f"| {ms:.2f} | {100 * ms / busy:.1f} | {n} | {k} |")
PY
