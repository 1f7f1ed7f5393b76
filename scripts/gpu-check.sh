#!/usr/bin/env bash
# gpu-check.sh [BUILD_DIR] [FILTER]: runs the GPU verification harness on the GPU machine: every CUDA op
# against the CPU reference, CUDA-graph replay, then the timing rows. Each check group runs in its own
# process, so a crash (a CUDA_CHECK abort, an illegal address) loses only that group. Printed last: the
# combined results table, the total, and a summary of rows and failures per group with the device and the
# date (docs/GPU-CHECK.md keeps that summary). Exit status 0 when every row passed and nothing crashed.
# FILTER (optional) keeps only the groups whose name contains it. For bisecting: CUDA_LAUNCH_BLOCKING=1
# (errors at the failing launch) and the debugging variables of src/common/env.h (docs/CONFIG.md).
set -uo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
filter=${2:-}
bin="$build_dir/qlt_gpu_check"
if [ ! -x "$bin" ]; then
  echo "gpu-check: $bin not found: build with cmake -S . -B $build_dir -DCMAKE_BUILD_TYPE=Release && cmake --build $build_dir" >&2
  exit 2
fi
device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true)
[ -n "$device" ] && echo "$device"
export LD_LIBRARY_PATH="$build_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
groups="embed rmsnorm rope elementwise swiglu fused_norms linear weight_stack lora adapter_fold attention generation lm_head_loss optimizer graph_capture dequant_cache perf"
table=$(mktemp)
summary=$(mktemp)
status=0
for g in $groups; do
  case "$g" in *"$filter"*) ;; *) continue ;; esac
  echo "==== $g"
  if [ "$g" = dequant_cache ]; then
    # the checks of the frozen-weight ops again with every weight kept dequantized (train.dequant_cache_gib:
    # weight_cache.cu's entries, their own row strides): rows marked "(dequant cache)"
    out=$(rc=0; for sub in linear weight_stack lora adapter_fold lm_head_loss graph_capture; do
            QLT_GPU_CHECK_DEQUANT_CACHE=100 "$bin" "$sub" 2>&1 || rc=$?; done
          exit $rc)
    rc=$?
    out=$(echo "$out" | sed 's/^| \([^|]*\)|/| \1(dequant cache) |/; s/^| check (dequant cache) |/| check |/')
  else
    out=$("$bin" "$g" 2>&1)
    rc=$?
  fi
  echo "$out" | sed -n '/^| check |/q;p'
  before=$(wc -l < "$table")
  echo "$out" | sed -n '/^| check |/,$p' | grep '^| ' | grep -v '^| check |' | grep -v '^|---' >> "$table"
  if [ "$rc" -gt 1 ]; then
    echo "| $g | | | | CRASH (exit $rc): $(echo "$out" | grep -m1 -iE 'error|abort' | tr '|' '/') |" >> "$table"
    status=1
  elif [ "$rc" -ne 0 ]; then
    status=1
  fi
  added=$(( $(wc -l < "$table") - before ))
  group_fails=$(tail -n "$added" "$table" | grep -c -E 'FAIL|CRASH' || true)
  echo "| $g | $added | $group_fails |" >> "$summary"
done
echo
echo "| check | shape | result | tolerance / unit | status |"
echo "|---|---|---|---|---|"
cat "$table"
fails=$(grep -c -E 'FAIL|CRASH' "$table" || true)
echo
echo "gpu-check: $(wc -l < "$table") rows, $fails failed"
echo
first_gpu=${device%%$'\n'*}
echo "gpu-check summary: ${first_gpu:-no nvidia-smi}, $(date -u +%Y-%m-%d)"
echo
echo "| group | rows | failed |"
echo "|---|---|---|"
cat "$summary"
echo "| all | $(wc -l < "$table") | $fails |"
rm -f "$table" "$summary"
exit "$status"
