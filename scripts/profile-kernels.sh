#!/usr/bin/env bash
# profile-kernels.sh: on the GPU machine, the device time of every kernel of one eager training step,
# summed by kernel name (ncu, clocks left alone), largest first. Where the per-phase breakdown of
# `qlora-train bench` says which phase is slow, this says which kernel.
#   scripts/profile-kernels.sh BIN_DIR MODEL_JSON MICRO_BATCH [TOP=40]   (BIN_DIR: carry/bin on that machine)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-carry/bin}
model=$2
mb=$3
top=${4:-40}
export LD_LIBRARY_PATH=$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
csv=${OUT:-/tmp}/kernels-$(basename "$model" .json)-mb$mb.csv
# One warm-up step is skipped (its first calls load cuBLAS kernels), the second step is profiled.
/usr/local/cuda/bin/ncu --clock-control none --csv --metrics gpu__time_duration.sum \
  "$bin/qlora-train" bench --model "$model" --micro-batch "$mb" --seq 2048 --steps 1 --warmup 1 >"$csv" 2>/dev/null
python3 - "$csv" "$top" <<'PY'
import csv, sys, collections
path, top = sys.argv[1], int(sys.argv[2])
rows = [l for l in open(path) if l.startswith('"')]
reader = csv.DictReader(rows)
per = collections.defaultdict(lambda: [0.0, 0])
ids = []
for r in reader:
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "ns")
    scale = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "nsecond": 1e-6, "ms": 1.0, "msecond": 1.0}.get(unit, 1e-6)
    ids.append((int(r["ID"]), r["Kernel Name"][:90], v * scale))
# Two steps ran (and the random weights' creation before them): the profiled step is every kernel after
# the first step's AdamW up to and including the second's.
ids.sort()
ends = [i for i, (_, name, _) in enumerate(ids) if "adamw_kernel" in name]
if len(ends) < 2:
    sys.exit(f"{path}: expected two AdamW launches, found {len(ends)}")
step = ids[ends[-2] + 1:ends[-1] + 1]
for _, name, ms in step:
    per[name][0] += ms
    per[name][1] += 1
total = sum(v[0] for v in per.values())
print(f"kernels in the step: {len(step)}, device time {total:.2f} ms")
print("| ms | % | launches | kernel |")
print("|---|---|---|---|")
for name, (ms, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[:top]:
    print(f"| {ms:.2f} | {100 * ms / total:.1f} | {n} | {name} |")
PY
