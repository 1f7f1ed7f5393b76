#!/usr/bin/env bash
# gpu-check.sh [BUILD_DIR] [FILTER]: runs the GPU verification harness on the GPU machine: every CUDA op
# against the CPU reference, CUDA-graph replay, then the timing rows; the results table is printed last.
# Exit status: 0 when every row passed. FILTER (optional) runs only the checks whose name contains it
# (embed, rmsnorm, rope, elementwise, linear, lora, attention, lm_head_loss, optimizer, graph_capture, perf).
set -uo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
filter=${2:-}
bin="$build_dir/qlt_gpu_check"
if [ ! -x "$bin" ]; then
  echo "gpu-check: $bin not found: build with cmake -S . -B $build_dir -DCMAKE_BUILD_TYPE=Release && cmake --build $build_dir" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
export LD_LIBRARY_PATH="$build_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log=$(mktemp)
# The checks print rows as they go (progress); the table (everything after the blank line before "| check")
# is printed again at the very end so it is the last thing on screen.
"$bin" $filter 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo
echo "================ results ================"
sed -n '/^| check |/,$p' "$log"
rm -f "$log"
exit "$rc"
