#!/usr/bin/env python3
"""nf4_check_bnb.py: writes what bitsandbytes itself produces, for qlt_gpu_check to compare against.

  python3 scripts/nf4_check_bnb.py OUT_DIR

OUT_DIR/bnb_cases.safetensors: for several shapes / dtypes / blocksizes, with and without double quant,
  caseK.input, caseK.blocksize, caseK.codes, caseK.absmax (F32, or U8 with double quant),
  caseK.nested_absmax, caseK.offset, caseK.nested_code, caseK.dequant
  (bitsandbytes.functional.quantize_4bit(quant_type="nf4") on CUDA, and dequantize_4bit of its output).
OUT_DIR/ckpt/: a tiny Llama saved 4-bit by transformers + bitsandbytes (save_pretrained) when transformers
  is importable; otherwise the same tensors from bitsandbytes' Linear4bit.state_dict() (what transformers
  saves for each module) and a config.json with quantization_config. ckpt/reference.safetensors holds
  bitsandbytes' dequantize_4bit of every quantized module as "<module>.dequant".
Needs torch with CUDA and bitsandbytes (scripts/gpu-check-nf4.sh installs the carried wheel).
"""
import json
import os
import struct
import sys

import torch

import bitsandbytes as bnb
import bitsandbytes.functional as F

DT_NAME = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.uint8: "U8",
           torch.int32: "I32"}


def save_safetensors(path, tensors, metadata=None):
    """A minimal safetensors writer (the safetensors package may be absent)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": DT_NAME[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def cases(out_dir):
    torch.manual_seed(0)
    specs = [  # (shape, dtype, blocksize, double quant, distribution)
        ((1024, 4096), torch.bfloat16, 64, True, "normal"),
        ((1024, 4096), torch.bfloat16, 64, False, "normal"),
        ((777, 1001), torch.float16, 64, True, "heavy"),
        ((333, 4097), torch.float32, 128, True, "heavy"),
        ((512, 2048), torch.bfloat16, 64, True, "zeros"),
        ((257, 999), torch.float32, 32, False, "zeros"),
        ((300, 5000), torch.bfloat16, 4096, True, "normal"),
        ((3584, 18944), torch.bfloat16, 64, True, "normal"),
    ]
    tensors = {}
    for k, (shape, dtype, bs, dq, dist) in enumerate(specs):
        x = torch.randn(shape, device="cuda", dtype=torch.float32)
        if dist == "normal":
            x = 0.02 * x
        elif dist == "heavy":
            x = x / torch.sqrt(-torch.log(torch.rand(shape, device="cuda").clamp_min(1e-30)))
        elif dist == "zeros":
            flat = x.view(-1)
            idx = torch.arange(flat.numel(), device="cuda")
            flat[((idx // 64) % 5 == 0) | ((idx // 4096) % 7 == 3)] = 0
        x = x.to(dtype)
        q, st = F.quantize_4bit(x, blocksize=bs, compress_statistics=dq, quant_type="nf4")
        deq = F.dequantize_4bit(q, st, quant_type="nf4")
        p = f"case{k}"
        tensors[p + ".input"] = x
        tensors[p + ".blocksize"] = torch.tensor([bs], dtype=torch.int32)
        tensors[p + ".codes"] = q.view(-1)
        tensors[p + ".dequant"] = deq
        if dq:
            tensors[p + ".absmax"] = st.absmax
            tensors[p + ".nested_absmax"] = st.state2.absmax
            tensors[p + ".offset"] = st.offset.reshape(1).float()
            tensors[p + ".nested_code"] = st.state2.code
        else:
            tensors[p + ".absmax"] = st.absmax
        print(f"{p}: {tuple(shape)} {dtype} blocksize {bs} double_quant {dq} {dist}")
    save_safetensors(os.path.join(out_dir, "bnb_cases.safetensors"), tensors)


QUANT_CONFIG = {
    "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
    "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
    "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
    "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes",
}


def checkpoint(out_dir):
    ckpt = os.path.join(out_dir, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    ref = {}
    try:
        import transformers
        from transformers import BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=256, intermediate_size=704, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=512)
        torch.manual_seed(1)
        LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(os.path.join(out_dir, "ckpt-src"))
        model = LlamaForCausalLM.from_pretrained(
            os.path.join(out_dir, "ckpt-src"), device_map="cuda", torch_dtype=torch.bfloat16,
            quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                   bnb_4bit_use_double_quant=True,
                                                   bnb_4bit_compute_dtype=torch.bfloat16))
        model.save_pretrained(ckpt)
        for name, mod in model.named_modules():
            if isinstance(mod, bnb.nn.Linear4bit):
                w = mod.weight
                ref[name + ".dequant"] = F.dequantize_4bit(w.data, w.quant_state, quant_type="nf4")
        print(f"ckpt: saved by transformers {transformers.__version__} + bitsandbytes {bnb.__version__}")
    except ImportError:
        torch.manual_seed(1)
        state = {}
        shapes = {"self_attn.q_proj": (256, 256), "self_attn.k_proj": (128, 256), "self_attn.v_proj": (128, 256),
                  "self_attn.o_proj": (256, 256), "mlp.gate_proj": (704, 256), "mlp.up_proj": (704, 256),
                  "mlp.down_proj": (256, 704)}
        for layer in range(2):
            for sub, (o, i) in shapes.items():
                name = f"model.layers.{layer}.{sub}"
                lin = bnb.nn.Linear4bit(i, o, bias=False, compute_dtype=torch.bfloat16, compress_statistics=True,
                                        quant_type="nf4")
                lin.weight = bnb.nn.Params4bit(torch.randn(o, i, dtype=torch.bfloat16) * 0.02, requires_grad=False,
                                               compress_statistics=True, quant_type="nf4")
                lin = lin.cuda()
                for k, v in lin.state_dict().items():
                    state[f"{name}.{k}"] = v
                w = lin.weight
                ref[name + ".dequant"] = F.dequantize_4bit(w.data, w.quant_state, quant_type="nf4")
        state["model.embed_tokens.weight"] = torch.randn(512, 256, dtype=torch.bfloat16)
        save_safetensors(os.path.join(ckpt, "model.safetensors"), state, {"format": "pt"})
        with open(os.path.join(ckpt, "config.json"), "w") as f:
            json.dump({"model_type": "llama", "hidden_size": 256, "quantization_config": QUANT_CONFIG}, f, indent=2)
        print(f"ckpt: transformers not importable: Linear4bit.state_dict() of bitsandbytes {bnb.__version__}")
    save_safetensors(os.path.join(ckpt, "reference.safetensors"), ref)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "nf4-bnb"
    os.makedirs(out_dir, exist_ok=True)
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), bitsandbytes {bnb.__version__}, "
          f"{torch.cuda.get_device_name()}")
    cases(out_dir)
    checkpoint(out_dir)


if __name__ == "__main__":
    main()
