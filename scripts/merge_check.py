#!/usr/bin/env python3
"""merge_check.py: what `qlora-train merge` writes loads in transformers as it is, and is the PEFT merge
(needs torch + transformers + peft; bitsandbytes and a CUDA GPU for the NF4 rows).

For each tiny fixture (tiny-qwen2, tiny-llama, tiny-qwen3) and its adapter-init, on the golden batch:
  1. --onto original, f32 and bf16: AutoModelForCausalLM.from_pretrained(OUT) against
     PeftModel(base, adapter) and against PeftModel(...).merge_and_unload() (float32, eager attention):
     max |logits difference| relative to the logits' max: <= 1e-5 for f32 (one rounding of W + s B A),
     <= 2e-2 for bf16 (every weight rounded to bf16, as the golden bf16 tests allow);
  2. --onto dequantized (model.quant nf4): against PeftModel on the base loaded by bitsandbytes in 4-bit NF4
     (double quant, blocksize 64, float32 compute; TF32 off): qlora-train's NF4 codes are bitsandbytes', so
     the merged f32 model is that model to float32 rounding (<= 1e-5);
  3. `qlora-train eval` of the f32 merged directory (model.quant none, no adapter, the CPU path) gives the
     loss of PeftModel(base, adapter) on the same batch to 1e-5 relative.
Prints a table; exit 1 on a miss.

    python3 scripts/merge_check.py BINARY FIXTURES_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def logits_of(model, ids):
    model.eval()
    with torch.no_grad():
        dev = next(model.parameters()).device
        return model(input_ids=ids.to(dev)).logits.float().cpu()


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def load(path, **kw):
    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager", **kw)


def merge(binary, cfg, adapter, out, *extra):
    p = subprocess.run([binary, "merge", "--config", cfg, "--adapter", adapter, "--out", out, *extra],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"qlora-train merge failed:\n{p.stdout}{p.stderr}")


def main():
    binary, fixtures, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    rows, failed = [], 0

    def row(model, what, err, tol):
        nonlocal failed
        ok = err <= tol
        failed += not ok
        rows.append(f"| {model} | {what} | {err:.2e} | {tol:.0e} | {'pass' if ok else 'FAIL'} |")

    for model in ["tiny-qwen2", "tiny-llama", "tiny-qwen3"]:
        fx = os.path.join(fixtures, model)
        adapter = os.path.join(fx, "adapter-init")
        out = os.path.join(work, model)
        os.makedirs(out, exist_ok=True)
        g = load_file(os.path.join(fx, "golden.safetensors"))
        ids, labels = g["input_ids"], g["labels"]
        cfg_none, cfg_nf4 = os.path.join(out, "none.yaml"), os.path.join(out, "nf4.yaml")
        for path, quant in [(cfg_none, "none"), (cfg_nf4, "nf4")]:
            with open(path, "w") as f:
                f.write(f"model: {{path: {fx}, quant: {quant}}}\n")

        peft = PeftModel.from_pretrained(load(fx), adapter)
        ref = logits_of(peft, ids)
        with torch.no_grad():
            peft_loss = peft(input_ids=ids, labels=labels).loss.item()
        hf_merged = logits_of(peft.merge_and_unload(), ids)

        for dtype, tol in [("f32", 1e-5), ("bf16", 2e-2)]:
            dst = os.path.join(out, f"original-{dtype}")
            merge(binary, cfg_none, adapter, dst, "--onto", "original", "--dtype", dtype)
            mine = logits_of(load(dst), ids)
            row(model, f"--onto original {dtype} vs PeftModel(base, adapter)", rel(mine, ref), tol)
            row(model, f"--onto original {dtype} vs PEFT merge_and_unload", rel(mine, hf_merged), tol)

        # qlora-train eval of the merged directory: the loss of PeftModel(base, adapter)
        tokens = os.path.join(out, "golden.jsonl")
        with open(tokens, "w") as f:
            for b in range(ids.shape[0]):
                f.write(json.dumps({"input_ids": ids[b].tolist(), "labels": labels[b].tolist()}) + "\n")
        ev = subprocess.run([binary, "eval", "--set", f"model.path={os.path.join(out, 'original-f32')}",
                             "--set", "model.quant=none", "--set", f"data.train={tokens}", "--set", "data.format=tokens",
                             "--set", f"data.seq_len={ids.shape[1]}", "--set", "data.packing=false",
                             "--set", "data.cache=false", "--set", "train.device=cpu",
                             "--set", f"output.dir={os.path.join(out, 'eval')}"], capture_output=True, text=True)
        if ev.returncode != 0:
            raise SystemExit(f"qlora-train eval failed:\n{ev.stdout}{ev.stderr}")
        loss = json.loads(ev.stdout.strip().splitlines()[-1])["loss"]
        row(model, "qlora-train eval of the f32 merge vs PEFT loss", abs(loss - peft_loss) / peft_loss, 1e-5)

        if torch.cuda.is_available():
            from transformers import BitsAndBytesConfig
            bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                     bnb_4bit_compute_dtype=torch.float32)
            q = load(fx, quantization_config=bnb, device_map={"": 0})
            qref = logits_of(PeftModel.from_pretrained(q, adapter), ids)
            dst = os.path.join(out, "dequantized-f32")
            merge(binary, cfg_nf4, adapter, dst, "--onto", "dequantized", "--dtype", "f32")
            mine = logits_of(load(dst, device_map={"": 0}), ids)
            row(model, "--onto dequantized f32 vs PeftModel(bnb NF4 base, adapter)", rel(mine, qref), 1e-5)
            mine_orig = logits_of(load(os.path.join(out, "original-f32"), device_map={"": 0}), ids)
            rows.append(f"| {model} | (for scale) --onto original vs the NF4 PEFT model | {rel(mine_orig, qref):.2e} | - | - |")
        else:
            rows.append(f"| {model} | --onto dequantized vs bitsandbytes NF4 + PEFT | - | - | skipped: no CUDA |")
    print("| fixture | check | max difference (rel. to max) | tolerance | status |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
