#!/usr/bin/env python3
"""peft_load_check.py: the adapter qlora-train writes loads in PEFT as it is (needs transformers + peft).

For each tiny fixture: `qlora-train train` runs the golden 3 steps on the CPU (fp32, exact path) into
OUT/<model>/; then transformers loads the fixture's base model, `PeftModel.from_pretrained` loads
OUT/<model>/final, and its loss on the golden batch (float32, eager attention) must equal the golden loss
after step 3 (losses[3]) to 1e-4 relative. Prints a table; exit 1 on a miss.

    python3 scripts/peft_load_check.py BINARY FIXTURES_DIR OUT_DIR
"""
import json
import os
import subprocess
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    binary, fixtures, work = sys.argv[1], sys.argv[2], sys.argv[3]
    rows, failed = [], 0
    for model in ["tiny-qwen2", "tiny-llama", "tiny-qwen3", "tiny-mistral", "tiny-qwen2-swa", "tiny-gemma2",
                  "tiny-gemma3", "tiny-phi3", "tiny-phi3-short"]:
        fx = os.path.join(fixtures, model)
        out = os.path.join(work, model)
        os.makedirs(out, exist_ok=True)
        g = load_file(os.path.join(fx, "golden.safetensors"))
        ids, labels = g["input_ids"], g["labels"]
        tokens = os.path.join(out, "golden.jsonl")
        with open(tokens, "w") as f:
            for b in range(ids.shape[0]):
                f.write(json.dumps({"input_ids": ids[b].tolist(), "labels": labels[b].tolist()}) + "\n")
        cfg = os.path.join(out, "run.yaml")
        with open(cfg, "w") as f:
            f.write(f"model: {{path: {fx}, quant: none}}\nlora: {{init_from: {fx}/adapter-init}}\n"
                    f"data: {{train: [{tokens}], format: tokens, seq_len: {ids.shape[1]}, packing: false, "
                    f"shuffle: false, cache: false}}\n"
                    f"train: {{device: cpu, lr: 1.0e-2, weight_decay: 0.01, max_grad_norm: 1.0, max_steps: 3, "
                    f"micro_batch: {ids.shape[0]}}}\noutput: {{dir: {out}/run, overwrite: true}}\n")
        subprocess.run([binary, "train", "--config", cfg], check=True, capture_output=True)
        base = AutoModelForCausalLM.from_pretrained(fx, torch_dtype=torch.float32, attn_implementation="eager")
        peft_model = PeftModel.from_pretrained(base, os.path.join(out, "run", "final"))
        peft_model.eval()
        with torch.no_grad():
            loss = peft_model(input_ids=ids, labels=labels).loss.item()
        ref = g["losses"][3].item()
        rel = abs(loss - ref) / ref
        ok = rel <= 1e-4
        failed += not ok
        rows.append(f"| {model} | {loss:.6f} | {ref:.6f} | {rel:.2e} | {'pass' if ok else 'FAIL'} |")
    print("| fixture | PEFT loss with qlora-train's final/ | golden losses[3] | relative difference | status |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
