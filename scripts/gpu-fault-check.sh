#!/usr/bin/env bash
# gpu-fault-check.sh [BIN_DIR]: the faults of docs/RELIABILITY.md on the CUDA backend (tests/unit/test_faults.c
# tries them on the CPU in CI). tiny-qwen3 on `train.device: cuda` over 16 random token rows, 8 steps, a checkpoint
# every 3 steps, eager and as a CUDA graph:
#   - a NaN gradient at step 3 (QLT_TEST_NAN_AT_STEP, eager): step 3 skipped (skipped_steps 1), the run finishes, the
#     final adapter finite
#   - three NaN steps in a row with train.max_bad_steps 3: the run stops with exit 1 and a finite checkpoint
#   - a recoverable device fault in step 5 (QLT_TEST_DEVICE_FAULT): checkpoint-4 written and named, exit 1, then
#     --resume auto finishes
#   - a sticky one in step 5: nothing saved, checkpoint-3 named and kept, exit 1, then --resume auto finishes
# Prints a table; exit 0 when every row passed.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-carry/bin}/qlora-train
device=${FAULT_DEVICE:-cuda} # FAULT_DEVICE=cpu tries the script itself where there is no GPU
work=$(mktemp -d)
python3 - "$work/train.jsonl" <<'PY'
import json, random, sys
random.seed(5)
with open(sys.argv[1], "w") as f:
    for _ in range(16):
        f.write(json.dumps({"input_ids": [random.randrange(512) for _ in range(24)]}) + "\n")
PY
rows=$(mktemp)
fails=0
row() { # name, ok (0/1), detail
  local status=pass
  [ "$2" -eq 1 ] || { status=FAIL; fails=$((fails + 1)); }
  echo "| $1 | $3 | $status |" | tee -a "$rows"
}
config() { # out dir, graph true/false, extra yaml lines of the train section
  cat > "$work/run.yaml" <<EOF
model: {path: tests/data/fixtures/tiny-qwen3, quant: nf4}
lora: {r: 4, alpha: 8}
data: {train: [$work/train.jsonl], format: tokens, seq_len: 24, cache: false}
train: {device: $device, lr: 1.0e-3, max_steps: 8, micro_batch: 2, log_every: 1, cuda_graph: $2$3}
output: {dir: $1, save_every: 3, overwrite: true}
EOF
}
finite_adapter() { # dir: 1 when every value of adapter_model.safetensors is finite
  python3 - "$1/adapter_model.safetensors" <<'PY'
import sys
import torch
from safetensors.torch import load_file
print(int(all(torch.isfinite(t).all().item() for t in load_file(sys.argv[1]).values())))
PY
}
last_field() { # metrics.jsonl, field
  python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])" "$1" "$2"
}

config "$work/nan" false ""
QLT_TEST_NAN_AT_STEP=3 "$bin" train --config "$work/run.yaml" > "$work/nan.log" 2>&1; rc=$?
skipped=$(last_field "$work/nan/metrics.jsonl" skipped_steps 2>/dev/null || echo "?")
fin=$(finite_adapter "$work/nan/final" 2>/dev/null || echo 0)
row "NaN gradient at step 3 (eager): skipped, run finishes" $([ $rc -eq 0 ] && [ "$skipped" = 1 ] && [ "$fin" = 1 ] && echo 1 || echo 0) \
    "exit $rc, skipped_steps $skipped, final adapter finite $fin"

config "$work/bad" false ", max_bad_steps: 3"
QLT_TEST_NAN_AT_STEP=2-8 "$bin" train --config "$work/run.yaml" > "$work/bad.log" 2>&1; rc=$?
ck=$(ls -d "$work"/bad/checkpoint-* 2>/dev/null | tail -1)
fin=$([ -n "$ck" ] && finite_adapter "$ck" || echo 0)
row "NaN at steps 2-8, max_bad_steps 3: stops, finite checkpoint" $([ $rc -ne 0 ] && [ "$fin" = 1 ] && echo 1 || echo 0) \
    "exit $rc, $(basename "${ck:-none}") finite $fin: $(grep -m1 -i 'bad steps\|in a row' "$work/bad.log" | cut -c1-120)"

for graph in false true; do
  for kind in recoverable sticky; do
    out="$work/$kind-$graph"
    config "$out" "$graph" ""
    QLT_TEST_DEVICE_FAULT=step:5:$kind "$bin" train --config "$work/run.yaml" > "$out.log" 2>&1; rc=$?
    want=$([ $kind = recoverable ] && echo checkpoint-4 || echo checkpoint-3)
    named=$(grep -c "$want" "$out.log")
    have=$([ -f "$out/$want/trainer_state.json" ] && echo 1 || echo 0)
    extra=$([ $kind = sticky ] && [ -d "$out/checkpoint-4" ] && echo " (a checkpoint-4 exists)" || echo "")
    "$bin" train --config "$work/run.yaml" --resume auto > "$out.resume.log" 2>&1; rrc=$?
    fin=$(finite_adapter "$out/final" 2>/dev/null || echo 0)
    ok=$([ $rc -ne 0 ] && [ "$named" -ge 1 ] && [ "$have" = 1 ] && [ -z "$extra" ] && [ $rrc -eq 0 ] && [ "$fin" = 1 ] && echo 1 || echo 0)
    row "$kind device fault in step 5 (graph $graph): $want kept, resume finishes" "$ok" \
        "exit $rc, $want named $named and present $have$extra; resume exit $rrc, final finite $fin"
  done
done
echo
echo "| fault (CUDA) | result | status |"
echo "|---|---|---|"
cat "$rows"
echo
echo "gpu-fault-check: $(wc -l < "$rows") rows, $fails failed"
rm -rf "$work" "$rows"
[ "$fails" -eq 0 ]
