#!/usr/bin/env python3
"""hf_generate_check.py: greedy generation of qlora-train against Hugging Face `generate` with the PEFT adapter,
on the GPU machine (transformers + peft are there).

For each tiny fixture (tests/data/fixtures: tiny-llama, tiny-qwen2, tiny-qwen3 with adapter-init) and each prompt
of token ids, HF + PEFT in float32 generates NEW tokens greedily (do_sample=False, no eos); qlora-train generates
from the same ids with `generate --prompt-ids` on the CPU (float32: the tokens must be identical) and on CUDA
(bf16 activations: identical, or the first difference falls where HF's two best logits are within 2e-2 of each
other relative to the largest logit, a tie at bf16 precision). With --model DIR (a Hugging Face directory, e.g.
SmolLM2 converted from the demo's GGUF) and --config YAML (a qlora-train config pointing at the same model), the
same comparison runs on text prompts with the chat template. Prints one table row per case; exit 1 on a failure.

    python3 scripts/hf_generate_check.py BINARY FIXTURES_DIR OUT_DIR [--new 24]
"""
import argparse
import json
import os
import subprocess
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

PROMPTS = [[1, 5, 9, 13, 2], [7], [3, 3, 3, 3, 3, 3, 3, 3, 11, 12], list(range(20, 60))]


def hf_greedy(model, ids, new):
    """HF greedy continuation of ids and, per step, the top-2 logit margin relative to the largest logit."""
    x = torch.tensor([ids], device=model.device)
    out = model.generate(x, max_new_tokens=new, do_sample=False, output_scores=True, return_dict_in_generate=True,
                         pad_token_id=0, eos_token_id=None)
    tokens = out.sequences[0, len(ids):].tolist()
    margins = []
    for s in out.scores:
        top = torch.topk(s[0].float(), 2).values
        margins.append(float((top[0] - top[1]) / top.abs().max().clamp_min(1e-30)))
    return tokens, margins


def qlt_generate(binary, config, adapter, ids, new, device):
    cmd = [binary, "generate", "--config", config, "--set", f"train.device={device}", "--prompt-ids",
           ",".join(str(i) for i in ids), "--max-new-tokens", str(new)]
    if adapter:
        cmd += ["--adapter", adapter]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip().splitlines()[-1] if r.stderr else r.returncode}")
    return json.loads(r.stdout.strip().splitlines()[-1])["ids"]


def compare(name, device, ref, margins, got, exact):
    first = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), None)
    if first is None and len(ref) == len(got):
        return f"| {name} | {device} | identical ({len(ref)} tokens) | | pass |", True
    tie = first is not None and margins[first] < 2e-2
    ok = not exact and tie
    why = f"first difference at token {first}: HF {ref[first]} vs {got[first]}, HF top-2 margin {margins[first]:.2e}"
    return f"| {name} | {device} | {why} | {'a bf16 tie' if tie else ''} | {'pass' if ok else 'FAIL'} |", ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("fixtures")
    ap.add_argument("out")
    ap.add_argument("--new", type=int, default=24)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows, ok_all = [], True
    for fx in ["tiny-llama", "tiny-qwen2", "tiny-qwen3"]:
        mdir = os.path.join(a.fixtures, fx)
        adapter = os.path.join(mdir, "adapter-init")
        base = AutoModelForCausalLM.from_pretrained(mdir, torch_dtype=torch.float32).to("cuda")
        model = PeftModel.from_pretrained(base, adapter).eval()
        config = os.path.join(a.out, f"{fx}.yaml")
        with open(config, "w") as f:
            f.write(f"model: {{path: {os.path.abspath(mdir)}, quant: none}}\n")
        for p, ids in enumerate(PROMPTS):
            ref, margins = hf_greedy(model, ids, a.new)
            for device in ["cpu", "cuda"]:
                got = qlt_generate(a.binary, config, adapter, ids, a.new, device)
                row, ok = compare(f"{fx} prompt {p} ({len(ids)} ids)", device, ref, margins, got, device == "cpu")
                rows.append(row)
                ok_all &= ok
        del model, base
        torch.cuda.empty_cache()
    print("| case | device | greedy tokens vs HF + PEFT generate | note | status |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(r)
    print(f"\nhf_generate_check: {len(rows)} cases, {sum('FAIL' in r for r in rows)} failed")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
