#!/usr/bin/env bash
# gpu-check-nf4.sh: the NF4 checks on the GPU machine: our kernels against the CPU reference, the dequantize
# bandwidth against a device-to-device copy, and (with the carried bitsandbytes wheel) bitsandbytes' own
# bytes and a checkpoint it saved. Prints the results table last; exit status 1 if a row failed.
#   scripts/gpu-check-nf4.sh [BUILD_DIR]     (default build; built here with nvcc and carried, with .whl)
# Writes its files under ${OUT:-/tmp/nf4-out} (the nf4_rcp table when the CPU emulation needs one).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${OUT:-/tmp/nf4-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv,noheader || true

bnb_ok=0
. scripts/bnb-wheel.sh
use_bnb_wheel && bnb_ok=1
if [ "$bnb_ok" = 1 ] && python3 scripts/nf4_check_bnb.py "$out/bnb" 2>&1 | tail -20; then
  if [ -f "$out/bnb/bnb_cases.safetensors" ]; then export QLT_NF4_BNB_FILE="$out/bnb/bnb_cases.safetensors"; fi
  if [ -f "$out/bnb/ckpt/reference.safetensors" ]; then export QLT_NF4_BNB_CKPT="$out/bnb/ckpt"; fi
else
  echo "gpu-check-nf4: bitsandbytes not available: the bnb rows are skipped (checked against the codebook and tree only)"
fi

QLT_NF4_RCP_OUT="$out" "$build/qlt_gpu_check" nf4 | tee "$out/nf4_check.txt"
status=${PIPESTATUS[0]}

# Round trip of `qlora-train quantize` on the GPU machine too, when a fixture is present.
if [ -d tests/data/fixtures/tiny-llama ]; then
  rm -rf "$out/q-in" "$out/q-out" && mkdir -p "$out/q-in"
  cp tests/data/fixtures/tiny-llama/config.json "$out/q-in/" && cp tests/data/fixtures/tiny-llama/model.bf16.safetensors "$out/q-in/model.safetensors"
  "$build/qlora-train" quantize "$out/q-in" "$out/q-out" && echo "quantize: wrote $out/q-out"
fi

echo
echo "## NF4 summary"
grep -E '^\| (nf4|bnb)' "$out/nf4_check.txt" | grep -E 'FAIL|perf|bnb ckpt|real-scale|copy/dq' || true
tail -1 "$out/nf4_check.txt"
exit "$status"
