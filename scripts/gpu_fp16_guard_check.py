#!/usr/bin/env python3
"""gpu_fp16_guard_check.py: `train.backward_a: fp16` end to end on a model whose weights overflow fp16.

The input-gradient GEMMs (dX = dY W) in fp16 scale dY and W by powers of two into fp16's range before the
product and undo the scales after it (src/cuda/linear.cu). This check builds tiny-llama with two projections
multiplied by 2^24 (|W| up to ~3e5, past fp16's 65504: a plain cast would make them infinite, every gradient
behind them NaN and every step skipped), trains 3 steps on the CUDA backend with backward_a fp16, bf16 and fp32
(model.quant none: the weights stay as constructed), and requires of the fp16 run: every loss and gradient norm
finite, no skipped step, losses within 1e-3 and gradient norms within 5e-3 (relative) of the exact fp32 run,
and the final adapter within 5e-3 of fp32's (max |diff| / max |fp32|). bf16 is printed for comparison.

    python3 scripts/gpu_fp16_guard_check.py BINARY FIXTURES_DIR OUT_DIR
"""
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

SCALE = 2.0 ** 24
SCALED = ["model.layers.0.mlp.down_proj.weight", "model.layers.1.self_attn.o_proj.weight"]
LOSS_TOL, NORM_TOL, ADAPTER_TOL = 1e-3, 5e-3, 5e-3


def main():
    binary, fixtures, work = sys.argv[1], sys.argv[2], sys.argv[3]
    src = os.path.join(fixtures, "tiny-llama")
    model = os.path.join(work, "tiny-llama-fp16-overflow")
    shutil.rmtree(model, ignore_errors=True)
    os.makedirs(model)
    for name in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(src, name), model)
    weights = load_file(os.path.join(src, "model.safetensors"))
    for name in SCALED:
        weights[name] = weights[name] * SCALE
    biggest = max(weights[n].abs().max().item() for n in SCALED)
    save_file(weights, os.path.join(model, "model.safetensors"), metadata={"format": "pt"})
    golden = load_file(os.path.join(src, "golden.safetensors"))
    tokens = os.path.join(work, "tokens.jsonl")
    with open(tokens, "w") as f:
        for b in range(golden["input_ids"].shape[0]):
            f.write(json.dumps({"input_ids": golden["input_ids"][b].tolist(),
                                "labels": golden["labels"][b].tolist()}) + "\n")
    seq = golden["input_ids"].shape[1]
    runs = {}
    for precision in ("fp32", "fp16", "bf16"):
        out = os.path.join(work, precision)
        cfg = os.path.join(work, f"{precision}.yaml")
        with open(cfg, "w") as f:
            f.write(f"model: {{path: {model}, quant: none}}\n"
                    f"lora: {{init_from: {os.path.join(src, 'adapter-init')}}}\n"
                    f"data: {{train: [{tokens}], format: tokens, seq_len: {seq}, packing: false, shuffle: false, "
                    f"cache: false}}\n"
                    f"train: {{device: cuda, backward_a: {precision}, lr: 1.0e-3, max_grad_norm: 0, max_steps: 3, "
                    f"micro_batch: 2, log_every: 100, cuda_graph: false}}\n"
                    f"output: {{dir: {out}, overwrite: true}}\n")
        p = subprocess.run([binary, "train", "--config", cfg], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"train with backward_a {precision} failed: {p.stderr.strip()}")
            sys.exit(1)
        metrics = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in l]
        adapter = load_file(os.path.join(out, "final", "adapter_model.safetensors"))
        runs[precision] = (metrics, adapter)
    failed = 0

    def check(name, ok, text):
        nonlocal failed
        failed += not ok
        print(f"| {name} | {text} | {'pass' if ok else 'FAIL'} |")

    print(f"largest |W| of the scaled projections: {biggest:.3e} (fp16 holds up to 65504)")
    print("| check | value | status |\n|---|---|---|")
    check("weights past fp16's range", biggest > 65504, f"{biggest:.3e}")
    m16, a16 = runs["fp16"]
    m32, a32 = runs["fp32"]
    for s in range(3):
        l16, l32 = m16[s]["loss"], m32[s]["loss"]
        g16, g32 = m16[s]["grad_norm"], m32[s]["grad_norm"]
        finite = l16 is not None and g16 is not None
        check(f"step {s + 1}: fp16 loss and grad norm finite, step not skipped",
              finite and m16[s]["skipped_steps"] == 0, f"loss {l16}, grad norm {g16}, skipped {m16[s]['skipped_steps']}")
        if finite:
            check(f"step {s + 1}: fp16 loss vs fp32", abs(l16 - l32) / abs(l32) <= LOSS_TOL,
                  f"{abs(l16 - l32) / abs(l32):.3e} (tol {LOSS_TOL:.0e})")
            check(f"step {s + 1}: fp16 grad norm vs fp32", abs(g16 - g32) / abs(g32) <= NORM_TOL,
                  f"{abs(g16 - g32) / abs(g32):.3e} (tol {NORM_TOL:.0e}; bf16: "
                  f"{abs(runs['bf16'][0][s]['grad_norm'] - g32) / abs(g32):.3e})")
    worst = max(((a16[k].double() - a32[k].double()).abs().max() / a32[k].double().abs().max()).item() for k in a32)
    check("final adapter fp16 vs fp32", worst <= ADAPTER_TOL, f"{worst:.3e} (tol {ADAPTER_TOL:.0e})")
    print(f"\nfp16_guard: {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
