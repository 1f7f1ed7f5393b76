#!/usr/bin/env python3
"""trace_summary.py: what one training step's kernel timeline says (the TSV tools/kernel_trace.c writes, as
scripts/trace-step.sh records it): the step's span and busy time, the largest gaps by neighbouring kernel pair,
the time per kernel, and the time per part of the step (GEMMs, attention, NF4 dequantization, ...: the table
in "Where a 7B step's time and energy go" of docs/PERF.md). With --against OLD.tsv, the kernels whose time changed most between
the two timelines (an A/B of two builds traced in the same device call).
  python3 scripts/trace_summary.py TRACE.tsv [--top N] [--against OLD.tsv]"""
import argparse
import collections
import re
import sys

# parts of the step, by the first pattern in a kernel's name that matches (cuBLAS's kernels are all nvjet_*)
PARTS = [
    ("nvjet_sm90_tss", "LoRA's small GEMMs (x A^T, dA, dB / du by cuBLAS)"),
    ("nvjet", "cuBLAS GEMMs (frozen weights, folded adapters, the adapters' products, lm_head)"),
    ("attn|sdpa|cudnn|flash", "attention (forward, backward, D, dQ conversion, GQA sum; cuDNN's SDPA)"),
    ("nf4_", "NF4 dequantization"),
    ("swiglu", "SwiGLU forward + backward"),
    ("lora_dudb|dudb_reduce|prep_kernel|sum_halves|sum_first_two|fold_b|split3", "LoRA's own kernels (du / dB pass, reduces, operand prep)"),
    ("rmsnorm|head_norm", "RMSNorm (with the residual add; Qwen3's head norms)"),
    ("rope", "RoPE"),
    ("ce_row|loss_sum|lm_head", "cross-entropy rows"),
    ("adamw|sumsq", "optimizer (gradient norm, AdamW)"),
    ("add8|add_kernel|embed", "residual adds, embedding"),
    ("memcpy|copy_rows", "copies"),
    ("memset", "memsets"),
]


def load_step(path):
    """the last full step of a trace: after the second-to-last AdamW launch up to and including the last"""
    rows = []
    for line in open(path):
        start, end, kind, _node, name = line.rstrip("\n").split("\t")
        rows.append((int(start), int(end), kind, name))
    ends = [i for i, r in enumerate(rows) if "adamw_kernel" in r[3]]
    if len(ends) < 2:
        sys.exit(f"{path}: expected at least two AdamW launches, found {len(ends)}")
    return rows[ends[-2] + 1:ends[-1] + 1]


def own_name(name):
    """CUPTI gives mangled names: keep the function's own (cuBLAS's kernel names as they are)"""
    m = re.match(r"_ZN?(\d+)", name)
    if m:
        return name[m.end():m.end() + int(m.group(1))]
    return name.split("(")[0][:70]


def short(name):
    return "GEMM (cuBLAS)" if name.startswith("nvjet") else own_name(name)


def part(name):
    for pattern, label in PARTS:
        if re.search(pattern, name):
            return label
    return "other"


def totals(step, key):
    out = collections.defaultdict(lambda: [0.0, 0])
    for r in step:
        out[key(r[3])][0] += (r[1] - r[0]) / 1e6
        out[key(r[3])][1] += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--against")
    a = ap.parse_args()
    step = load_step(a.trace)
    span = (step[-1][1] - step[0][0]) / 1e6
    busy = sum(r[1] - r[0] for r in step) / 1e6
    kinds = collections.Counter(r[2] for r in step)
    print(f"step span {span:.2f} ms, busy {busy:.2f} ms: {kinds['K']} kernels, {kinds['C']} copies, {kinds['S']} memsets")
    gaps = collections.defaultdict(lambda: [0.0, 0])
    for x, y in zip(step, step[1:]):
        key = f"{short(x[3])} -> {short(y[3])}"
        gaps[key][0] += (y[0] - x[1]) / 1e3
        gaps[key][1] += 1
    print(f"gaps {sum(v[0] for v in gaps.values()) / 1e3:.2f} ms; largest by neighbouring pair:")
    print("| ms | count | us each | pair |\n|---|---|---|---|")
    for k, (us, n) in sorted(gaps.items(), key=lambda kv: -kv[1][0])[:8]:
        print(f"| {us / 1e3:.2f} | {n} | {us / n:.2f} | {k} |")
    print("| ms | % | count | kernel |\n|---|---|---|---|")
    for k, (ms, n) in sorted(totals(step, short).items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"| {ms:.2f} | {100 * ms / busy:.1f} | {n} | {k} |")
    print("| ms | % | part of the step |\n|---|---|---|")
    for k, (ms, _n) in sorted(totals(step, part).items(), key=lambda kv: -kv[1][0]):
        print(f"| {ms:.2f} | {100 * ms / busy:.1f} | {k} |")
    if a.against:
        old = load_step(a.against)
        before, after = totals(old, own_name), totals(step, own_name)
        old_busy = sum(r[1] - r[0] for r in old) / 1e6
        print(f"against {a.against}: busy {old_busy:.2f} -> {busy:.2f} ms; largest changes:")
        print("| ms before (count) | ms after (count) | change | kernel |\n|---|---|---|---|")
        names = sorted(set(before) | set(after), key=lambda k: -abs(after[k][0] - before[k][0]))
        for k in names[:a.top]:
            b, n = before[k], after[k]
            print(f"| {b[0]:.2f} ({b[1]}) | {n[0]:.2f} ({n[1]}) | {n[0] - b[0]:+.2f} | {k} |")


if __name__ == "__main__":
    main()
