#!/usr/bin/env python3
"""hf_reference.py: the Hugging Face transformers + PEFT side of the real-scale comparisons.

Makes a model of a given config.json with random weights (seeded), saves it as bf16 safetensors, makes
the LoRA init (PEFT default: A kaiming-uniform, B = 0, then B ~ N(0, 0.02) so the first step already
depends on both), saves it as a PEFT adapter, writes the batches as a qlora-train `tokens` file, then
trains with torch AdamW (constant lr, clip 1.0) for N steps and writes the losses and the timing.

    python3 scripts/hf_reference.py --config models/qwen2.5-0.5b/config.json --out /tmp/cmp \
        --steps 20 --batch 4 --seq 512 [--time-only] [--grad-checkpoint] [--quant nf4]

--quant nf4 trains HF's QLoRA instead: the seven projections quantized by bitsandbytes (NF4, double quant,
bf16 compute) before the adapters are added.

Outputs in --out: model/ (config.json + model.safetensors), adapter-init/, data.jsonl,
hf_losses.json {"losses": [...], "tokens_per_s": ..., "peak_gib": ...}.
"""
import argparse
import json
import os
import time

import torch


PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize_projections(model):
    """Each projection's bf16 weight quantized by bitsandbytes into a Linear4bit (NF4 with double quant, bf16
    compute): what loading with BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
    bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16) gives, without a checkpoint."""
    import bitsandbytes as bnb

    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name not in PROJECTIONS or not isinstance(child, torch.nn.Linear):
                continue
            q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                  compute_dtype=torch.bfloat16, compress_statistics=True, quant_type="nf4",
                                  device="meta")
            q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, compress_statistics=True,
                                         quant_type="nf4").to("cuda")
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            setattr(module, name, q)
    torch.cuda.empty_cache()


def gpu_energy_counter():
    """A function returning the GPU's energy counter in millijoules (NVML, as qlora-train's bench reads it), or
    None where NVML or the counter is missing."""
    import ctypes
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        dev = ctypes.c_void_p()
        uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
        found = uuid is not None and nvml.nvmlDeviceGetHandleByUUID(
            ctypes.c_char_p(("GPU-" + str(uuid)).encode()), ctypes.byref(dev)) == 0
        if not found and (torch.cuda.device_count() != 1 or nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) != 0):
            return None
        mj = ctypes.c_ulonglong()
        if nvml.nvmlDeviceGetTotalEnergyConsumption(dev, ctypes.byref(mj)) != 0:
            return None
    except (OSError, AttributeError):
        return None

    def read():
        nvml.nvmlDeviceGetTotalEnergyConsumption(dev, ctypes.byref(mj))
        return mj.value
    return read


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-only", action="store_true", help="skip saving weights/data (benchmark)")
    ap.add_argument("--grad-checkpoint", action="store_true")
    ap.add_argument("--warmup", type=int, default=2, help="steps excluded from the timing")
    ap.add_argument("--quant", choices=["bf16", "nf4"], default="bf16",
                    help="nf4: the seven projections as bitsandbytes Linear4bit (NF4, double quant, bf16 compute): HF QLoRA")
    args = ap.parse_args()

    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    cfg = AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(args.config)))
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.config.use_cache = False
    if not args.time_only:
        model.save_pretrained(os.path.join(args.out, "model"), safe_serialization=True)
    if args.quant == "nf4":
        quantize_projections(model)
    lcfg = LoraConfig(r=args.r, lora_alpha=args.alpha, lora_dropout=0.0,
                      target_modules=list(PROJECTIONS),
                      task_type="CAUSAL_LM")
    model = get_peft_model(model, lcfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    if not args.time_only:
        model.save_pretrained(os.path.join(args.out, "adapter-init"))
    if args.grad_checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed + 1)
    data = torch.randint(0, cfg.vocab_size, (args.steps, args.batch, args.seq), generator=g)
    if not args.time_only:
        with open(os.path.join(args.out, "data.jsonl"), "w") as f:
            for s in range(args.steps):
                for b in range(args.batch):
                    f.write(json.dumps({"input_ids": data[s, b].tolist()}) + "\n")
    losses, times = [], []
    torch.cuda.reset_peak_memory_stats()
    model.train()
    energy = gpu_energy_counter()
    e0 = e1 = None
    for s in range(args.steps):
        torch.cuda.synchronize()
        if s == args.warmup and energy:
            e0 = energy()
        t0 = time.perf_counter()
        ids = data[s].cuda()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(out.loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if e0 is not None:
        e1 = energy()
    timed = sorted(times[args.warmup:]) or times
    median = timed[len(timed) // 2]
    res = {"losses": losses, "step_s_median": median, "tokens_per_s": args.batch * args.seq / median,
           "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "config": args.config, "batch": args.batch,
           "seq": args.seq, "r": args.r, "grad_checkpoint": args.grad_checkpoint, "quant": args.quant}
    if e0 is not None and e1 is not None and e1 > e0:
        measured = args.steps - args.warmup
        res["joules_per_step"] = (e1 - e0) / 1e3 / measured
        res["millijoules_per_token"] = (e1 - e0) / measured / (args.batch * args.seq)
        res["power_w_energy"] = (e1 - e0) / 1e3 / sum(times[args.warmup:])
    with open(os.path.join(args.out, "hf_losses.json"), "w") as f:
        json.dump(res, f)
    print(json.dumps({k: v for k, v in res.items() if k != "losses"}))


if __name__ == "__main__":
    main()
