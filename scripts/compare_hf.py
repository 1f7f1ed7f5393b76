#!/usr/bin/env python3
"""compare_hf.py: real-scale agreement with Hugging Face transformers + PEFT (GPU machine).

For each config.json given: scripts/hf_reference.py makes random bf16 weights, a PEFT adapter init and
random-token batches, and trains N steps with HF + PEFT (SDPA, torch AdamW, clip 1.0); then qlora-train
trains on the same weights (model.quant none), adapter init and batches on CUDA. The losses must agree
within 2% at every step. Prints a per-step table and a summary row per model; exit 1 on a miss.

    python3 scripts/compare_hf.py BINARY OUT_DIR CONFIG.json [CONFIG.json ...] [--steps 20 --batch 4 --seq 512]
"""
import argparse
import json
import os
import subprocess
import sys

TOL = 0.02


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("out")
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    summary, failed = [], 0
    for cfg_path in args.configs:
        name = os.path.basename(cfg_path).replace(".json", "")
        work = os.path.join(args.out, name)
        os.makedirs(work, exist_ok=True)
        cfg_dir = os.path.join(work, "cfg")
        os.makedirs(cfg_dir, exist_ok=True)
        subprocess.run(["cp", cfg_path, os.path.join(cfg_dir, "config.json")], check=True)
        hf = subprocess.run([sys.executable, os.path.join(here, "hf_reference.py"), "--config",
                             os.path.join(cfg_dir, "config.json"), "--out", work, "--steps", str(args.steps),
                             "--batch", str(args.batch), "--seq", str(args.seq), "--lr", str(args.lr)],
                            capture_output=True, text=True)
        if hf.returncode != 0:
            print(hf.stderr[-3000:])
            failed += 1
            summary.append((name, "HF run failed", "", ""))
            continue
        ref = json.load(open(os.path.join(work, "hf_losses.json")))
        yaml = os.path.join(work, "qlt.yaml")
        with open(yaml, "w") as f:
            f.write(f"model: {{path: {work}/model, quant: none}}\n"
                    f"lora: {{init_from: {work}/adapter-init}}\n"
                    f"data: {{train: [{work}/data.jsonl], format: tokens, seq_len: {args.seq}, packing: false, "
                    f"shuffle: false, cache: false}}\n"
                    f"train: {{device: cuda, lr: {args.lr}, weight_decay: 0.0, max_grad_norm: 1.0, "
                    f"max_steps: {args.steps}, micro_batch: {args.batch}, log_every: 5}}\n"
                    f"output: {{dir: {work}/qlt, overwrite: true}}\n")
        q = subprocess.run([args.binary, "train", "--config", yaml], capture_output=True, text=True)
        if q.returncode != 0:
            print(q.stderr[-3000:])
            failed += 1
            summary.append((name, "qlora-train run failed", "", ""))
            continue
        mine = [json.loads(l) for l in open(os.path.join(work, "qlt", "metrics.jsonl")) if '"loss"' in l]
        print(f"\n{name}: step | HF+PEFT loss | qlora-train loss | rel diff")
        worst = 0.0
        for s, (a, b) in enumerate(zip(ref["losses"], [m["loss"] for m in mine])):
            d = abs(a - b) / abs(a)
            worst = max(worst, d)
            print(f"  {s + 1:3d} | {a:.5f} | {b:.5f} | {d:.2e}")
        ok = worst <= TOL and len(mine) == len(ref["losses"])
        failed += not ok
        summary.append((name, f"{worst:.2e}", f"{TOL}", "pass" if ok else "FAIL"))
    print("\n| model (random weights, bf16) | worst per-step loss difference vs HF+PEFT | tolerance | status |")
    print("|---|---|---|---|")
    for r in summary:
        print("| " + " | ".join(r) + " |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
