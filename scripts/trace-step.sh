#!/usr/bin/env bash
# trace-step.sh: on the GPU machine, the timeline of one replayed (CUDA graph) or eager training step, kernel
# by kernel, as the GPU ran it: clocks and caches as in a real run (ncu serializes kernels and flushes
# caches; Nsight Systems is not installed there). Prints (scripts/trace_summary.py) the step's span, the
# kernels' busy time, the gaps between them by neighbouring pair, the time per kernel name and per part of the
# step; the raw TSV stays in $OUT (or /tmp), for trace_summary.py --against in an A/B of two builds.
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
python3 scripts/trace_summary.py "$tsv" --top "$top"
