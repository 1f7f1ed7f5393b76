#!/usr/bin/env python3
"""gguf_to_hf.py: a llama.cpp GGUF model dequantized by llama.cpp's own gguf-py into a Hugging Face model
directory (config.json + model.safetensors, float32), llama.cpp's q/k row permutation undone for Llama-family
files. The reference side of scripts/gguf-real-check.sh: qlora-train's GGUF loader must give the same model.

  .cache/venv/bin/python scripts/gguf_to_hf.py MODEL.gguf OUT_DIR
"""
import json
import os
import struct
import sys

import numpy as np

from gguf import GGUFReader
from gguf.quants import dequantize

HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
      "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
      "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
      "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
           "qwen3": "Qwen3ForCausalLM"}


def field(r, key, default=None):
    f = r.fields.get(key)
    return f.contents() if f is not None else default


def unpermute(w, n_head):
    """The inverse of convert_hf_to_gguf.py's LlamaModel.permute (rows of each head de-interleaved)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    _, layer, module, kind = name.split(".")
    return "model.layers.%s.%s.%s" % (layer, HF[module], kind)


def main():
    src, out = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    arch = field(r, "general.architecture")
    n_head = field(r, arch + ".attention.head_count")
    n_kv = field(r, arch + ".attention.head_count_kv", n_head)
    hidden = field(r, arch + ".embedding_length")
    head_dim = field(r, arch + ".attention.key_length", hidden // n_head)
    names = {t.name for t in r.tensors}
    cfg = {
        "architectures": [CLASSES[arch]], "model_type": arch, "hidden_act": "silu",
        "hidden_size": hidden, "intermediate_size": field(r, arch + ".feed_forward_length"),
        "num_hidden_layers": field(r, arch + ".block_count"), "num_attention_heads": n_head,
        "num_key_value_heads": n_kv, "head_dim": head_dim,
        "rms_norm_eps": field(r, arch + ".attention.layer_norm_rms_epsilon"),
        "rope_theta": field(r, arch + ".rope.freq_base", 10000.0),
        "max_position_embeddings": field(r, arch + ".context_length", 0),
        "vocab_size": len(field(r, "tokenizer.ggml.tokens")),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "torch_dtype": "float32",
    }
    if "rope_freqs.weight" in names:
        sys.exit("rope_freqs.weight (Llama-3 rope scaling) has no config.json form here")
    header, blobs, off = {}, [], 0
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape)]
        w = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        if arch in ("llama", "mistral") and t.name.endswith(("attn_q.weight", "attn_q.bias")):
            w = unpermute(w, n_head)
        elif arch in ("llama", "mistral") and t.name.endswith(("attn_k.weight", "attn_k.bias")):
            w = unpermute(w, n_kv)
        w = np.ascontiguousarray(w)
        header[hf_name(t.name)] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + w.nbytes]}
        blobs.append(w.tobytes())
        off += w.nbytes
    os.makedirs(out, exist_ok=True)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print("wrote %s: %d tensors, %s" % (out, len(header), CLASSES[arch]))


if __name__ == "__main__":
    main()
