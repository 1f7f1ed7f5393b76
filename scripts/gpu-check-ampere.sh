#!/usr/bin/env bash
# gpu-check-ampere.sh PTX_BIN_DIR [SM90_BIN_DIR] [MODELS_DIR]: the path Ampere and Ada GPUs (sm_80 / 86 / 89) run,
# tested on a Hopper. PTX_BIN_DIR holds qlora-train and qlt_gpu_check built with -DQLT_CUDA_PTX_ONLY=ON (the own
# kernels as compute_80 PTX only, so the driver JIT-compiles them and no sm_90 code runs; cuBLAS and cuDNN keep
# their own machine code). QLT_CUDA_CAPABILITY makes the backend choose kernels as on 8.0 (A100: 163 KiB of shared
# memory a block) and 8.6 / 8.9 (A10, L4, RTX 3090 / 4090: 99 KiB). Runs, in order:
#   1. the JIT: the first start with an empty driver cache (every kernel compiled: CUDA_MODULE_LOADING=EAGER)
#      against the second (from the cache)
#   2. scripts/gpu-check.sh (every CUDA op against the CPU reference) as 8.0 (every group but dequant_cache and
#      perf), and as 8.6 the groups whose kernels depend on shared memory (attention, lora, adapter_fold,
#      graph_capture, generation)
#   3. scripts/gpu_golden.py (the golden fixtures through the CLI) as 8.6
#   4. bench: the Qwen2.5-1.5B shape as 8.6 and 8.0 on the PTX build, and on SM90_BIN_DIR's sm_90a build
# Prints a summary table last; exit 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ptx=${1:?usage: gpu-check-ampere.sh PTX_BIN_DIR [SM90_BIN_DIR] [MODELS_DIR]}
sm90=${2:-}
models=${3:-carry/models}
export LD_LIBRARY_PATH="$ptx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
summary=$(mktemp)
status=0

echo "==== JIT"
cache=$(mktemp -d)
t0=$(date +%s.%N)
CUDA_CACHE_PATH=$cache CUDA_MODULE_LOADING=EAGER "$ptx/qlt_gpu_check" embed >/dev/null 2>&1 || status=1
t1=$(date +%s.%N)
CUDA_CACHE_PATH=$cache CUDA_MODULE_LOADING=EAGER "$ptx/qlt_gpu_check" embed >/dev/null 2>&1 || status=1
t2=$(date +%s.%N)
cold=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}'); warm=$(awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.1f", b - a}')
echo "| JIT: first start, empty cache / second start | $cold s / $warm s | cache $(du -sh "$cache" | cut -f1) |" | tee -a "$summary"
rm -rf "$cache"
# the backend says which capability it chose kernels for
QLT_CUDA_CAPABILITY=8.6 "$ptx/qlt_gpu_check" embed 2>&1 | grep -m1 'chosen as on' | tee -a "$summary"

run_check() { # capability, filter (empty: all)
  local cap=$1 filter=$2 out rc
  echo "==== gpu-check as compute capability $cap ${filter:+($filter)}"
  out=$(QLT_CUDA_CAPABILITY=$cap scripts/gpu-check.sh "$ptx" "$filter" 2>&1); rc=$?
  echo "$out" | grep -E 'FAIL|CRASH' | head -40
  echo "$out" | sed -n '/^gpu-check summary/,$p'
  echo "| gpu-check as $cap${filter:+ ($filter)} | $(echo "$out" | grep -m1 '^gpu-check: ') | exit $rc |" >> "$summary"
  [ "$rc" -eq 0 ] || status=1
}
# every group but dequant_cache (the same kernels again) and perf (timings)
for g in embed rmsnorm rope elementwise swiglu fused_norms linear weight_stack lora adapter_fold attention generation \
         lm_head_loss optimizer graph_capture; do run_check 8.0 "$g"; done
for g in attention lora adapter_fold graph_capture generation; do run_check 8.6 "$g"; done

echo "==== golden fixtures as 8.6"
golden_out=$(mktemp -d)
out=$(QLT_CUDA_CAPABILITY=8.6 python3 scripts/gpu_golden.py "$ptx/qlora-train" tests/data/fixtures "$golden_out" 2>&1); rc=$?
echo "$out" | tail -n 40
echo "| gpu_golden.py as 8.6 | $(echo "$out" | grep -m1 '^gpu_golden: ') | exit $rc |" >> "$summary"
[ "$rc" -eq 0 ] || status=1
rm -rf "$golden_out"

echo "==== bench (Qwen2.5-1.5B shape, NF4, r 16, micro-batch 4, seq 1024)"
bench() { # label, bin dir, capability (empty: the device's own)
  local out
  out=$(QLT_CUDA_CAPABILITY=$3 LD_LIBRARY_PATH="$2:${LD_LIBRARY_PATH:-}" "$2/qlora-train" bench --model "$models/qwen2.5-1.5b.json" \
        --micro-batch 4 --seq 1024 --steps 10 2>&1 | grep -m1 'tokens/s')
  echo "| bench $1 | $out | |" | tee -a "$summary"
}
bench "PTX build as 8.6" "$ptx" 8.6
bench "PTX build as 8.0" "$ptx" 8.0
[ -n "$sm90" ] && bench "sm_90a build" "$sm90" ""

echo
echo "| check | result | |"
echo "|---|---|---|"
cat "$summary"
rm -f "$summary"
exit "$status"
