#!/usr/bin/env python3
"""make_seeds.py: writes the seed corpora of the libFuzzer harnesses (tests/fuzz/<harness>/) from the test
fixtures, cut down so that each seed is small (the fuzzer mutates faster the shorter its inputs).
    tests/fuzz/make_seeds.py BUILD_DIR     (BUILD_DIR: a QLT_FUZZ build, for the seeds the harnesses write)
Run from the repository root; the corpora are committed, so this is only needed to remake them. The found-*
files beside the seeds are inputs the fuzzers found crashing (kept, so every run replays them); this script
leaves them alone."""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import yaml

SEP = b"\n--8<--\n"
FIX = "tests/data/fixtures"
build = sys.argv[1] if len(sys.argv) > 1 else "build-fuzz"


def put(harness, name, data):
    os.makedirs(f"tests/fuzz/{harness}", exist_ok=True)
    with open(f"tests/fuzz/{harness}/{name}", "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw bytes)"""
    header, off, blob = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blob += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def f32(vals):
    return struct.pack(f"<{len(vals)}f", *vals)


# safetensors: a few dtypes and shapes, metadata, an empty tensor
put("safetensors", "f32_bf16", safetensors({"a": ("F32", [2, 3], f32([1, 2, 3, 4, 5, 6])),
                                            "b": ("BF16", [4], b"\x80\x3f" * 4),
                                            "c": ("F16", [2], b"\x00\x3c" * 2)}, {"format": "pt"}))
put("safetensors", "ints_empty", safetensors({"i": ("I64", [2], struct.pack("<2q", 1, -1)),
                                              "u": ("U8", [3], b"abc"), "e": ("F32", [0, 4], b"")}))
put("safetensors", "f64_scalar", safetensors({"s": ("F64", [], struct.pack("<d", 3.5))}))

# safetensors_index: an index over two shards
s1 = safetensors({"model.a": ("F32", [2], f32([1, 2]))})
s2 = safetensors({"model.b": ("BF16", [2, 2], b"\x80\x3f" * 4)})
index = json.dumps({"metadata": {"total_size": 16},
                    "weight_map": {"model.a": "model-00001-of-00002.safetensors",
                                   "model.b": "model-00002-of-00002.safetensors"}}).encode()
put("safetensors_index", "two_shards", index + SEP + s1 + SEP + s2)
put("safetensors_index", "no_index", b"" + SEP + s1)

# model_config: the fixtures' config.json, and a llama3 rope-scaling one
for m in ("tiny-llama", "tiny-qwen2", "tiny-qwen3"):
    shutil.copy(f"{FIX}/{m}/config.json", f"tests/fuzz/model_config/{m}.json") if os.path.isdir(
        "tests/fuzz/model_config") else (os.makedirs("tests/fuzz/model_config"),
                                        shutil.copy(f"{FIX}/{m}/config.json", f"tests/fuzz/model_config/{m}.json"))
cfg = json.load(open(f"{FIX}/tiny-llama/config.json"))
cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}
put("model_config", "llama3_rope.json", json.dumps(cfg))

# config_yaml / config_json: the shipped configs, and the same as JSON
for c in ("demo", "example"):
    text = open(f"configs/{c}.yaml").read()
    put("config_yaml", f"{c}.yaml", text)
    put("config_json", f"{c}.json", json.dumps(yaml.safe_load(text), indent=1))


# tokenizer: each fixture tokenizer.json cut to its first ids, the merges among them, and its added tokens
def cut_tokenizer(path, keep=160):
    t = json.load(open(path))
    model = t["model"]
    vocab = {k: v for k, v in model["vocab"].items() if v < keep}
    merges = []
    for m in model.get("merges", []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model["vocab"] = vocab
    model["merges"] = merges
    t["added_tokens"] = [dict(a, id=keep + i) for i, a in enumerate(t.get("added_tokens", [])[:6])]
    return json.dumps(t, ensure_ascii=False).encode()


for tk in ("tok-qwen2style", "tok-llama3style", "tok-smollm2", "tok-mistral"):
    put("tokenizer", tk, cut_tokenizer(f"{FIX}/{tk}/tokenizer.json") + SEP + "Hello, world! 12345 ünï\n".encode())

# dataset_line: byte 0 = format (text 0, completion 1, alpaca 2, chat 3, tokens 4; +8 llama3, +16 train on
# prompt, +32 gzip), then the file
lines = {
    0: '{"text": "Hello world."}\n{"text": "Second line, with \\u00e9."}\n',
    1: '{"prompt": "2+2=", "completion": " 4"}\n',
    2: '{"instruction": "Add", "input": "2 and 2", "output": "4"}\n{"instruction": "Greet", "output": "Hi"}\n',
    3: '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, '
       '{"role": "assistant", "content": "Hello!"}]}\n',
    4: '{"input_ids": [1, 2, 3, 4], "labels": [-100, 2, 3, 4]}\n{"input_ids": [5, 6]}\n',
}
for fmt, text in lines.items():
    put("dataset_line", f"format{fmt}", bytes([fmt]) + text.encode())
put("dataset_line", "chat_llama3", bytes([3 + 8]) + lines[3].encode())
put("dataset_line", "text_gz", bytes([0 + 32]) + gzip.compress(lines[0].encode(), mtime=0))

# chat_template: tokenizer_config.json, then a chat line; last byte's bit 0 picks the tokenizer
chatml = {"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
          "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
llama3 = {"chat_template": [{"name": "default", "template": "<|start_header_id|>{{ role }}<|end_header_id|>"}],
          "eos_token": {"content": "<|eot_id|>"}}
put("chat_template", "chatml", json.dumps(chatml) + SEP.decode() + lines[3].strip())
put("chat_template", "llama3", json.dumps(llama3) + SEP.decode() + lines[3].strip())

# bnb_checkpoint: a one-layer model (hidden 16) with random F32 weights, quantized by qlora-train quantize
tmp = tempfile.mkdtemp()
micro = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
         "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1, "vocab_size": 32,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True, "max_position_embeddings": 64}
shapes = {"model.embed_tokens.weight": [32, 16], "model.norm.weight": [16],
          "model.layers.0.input_layernorm.weight": [16], "model.layers.0.post_attention_layernorm.weight": [16],
          "model.layers.0.self_attn.q_proj.weight": [16, 16], "model.layers.0.self_attn.k_proj.weight": [8, 16],
          "model.layers.0.self_attn.v_proj.weight": [8, 16], "model.layers.0.self_attn.o_proj.weight": [16, 16],
          "model.layers.0.mlp.gate_proj.weight": [32, 16], "model.layers.0.mlp.up_proj.weight": [32, 16],
          "model.layers.0.mlp.down_proj.weight": [16, 32]}
seed = 1
tensors = {}
for name, shape in shapes.items():
    n = 1
    for d in shape:
        n *= d
    vals = []
    for _ in range(n):
        seed = (seed * 6364136223846793005 + 1442695040888963407) % 2**64
        vals.append(((seed >> 40) / 2**24 - 0.5) * 0.1 if "norm" not in name else 1.0)
    tensors[name] = ("F32", shape, f32(vals))
os.makedirs(f"{tmp}/dense")
json.dump(micro, open(f"{tmp}/dense/config.json", "w"))
open(f"{tmp}/dense/model.safetensors", "wb").write(safetensors(tensors))
subprocess.run([f"{build}/qlora-train", "quantize", f"{tmp}/dense", f"{tmp}/q"], check=True)
put("bnb_checkpoint", "nf4_dq", open(f"{tmp}/q/config.json", "rb").read() + SEP +
    open(f"{tmp}/q/model.safetensors", "rb").read())
subprocess.run([f"{build}/qlora-train", "quantize", "--no-double-quant", f"{tmp}/dense", f"{tmp}/q2"], check=True)
put("bnb_checkpoint", "nf4", open(f"{tmp}/q2/config.json", "rb").read() + SEP +
    open(f"{tmp}/q2/model.safetensors", "rb").read())
put("bnb_checkpoint", "dense", json.dumps(micro).encode() + SEP + open(f"{tmp}/dense/model.safetensors", "rb").read())

# lora / checkpoint: the inputs the harnesses write themselves (an adapter, a checkpoint they saved)
for h in ("lora", "checkpoint"):
    os.makedirs(f"tests/fuzz/{h}", exist_ok=True)
    subprocess.run([f"{build}/fuzz_{h}"], env=dict(os.environ, FUZZ_WRITE_SEED=f"tests/fuzz/{h}/saved"),
                   check=True, stderr=subprocess.DEVNULL)

# gguf: the small fixture file of every tensor type (the micro model as GGUF follows)
for g in ("types.gguf",):
    os.makedirs("tests/fuzz/gguf", exist_ok=True)
    shutil.copy(f"tests/data/gguf/{g}", f"tests/fuzz/gguf/{g}")



# gguf: the micro model as a llama GGUF (F32 and F16 tensors) with a byte-level BPE tokenizer of its 32 ids
def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == 4:  # u32
        return out + struct.pack("<I", value)
    if vtype == 6:  # f32
        return out + struct.pack("<f", value)
    if vtype == 8:  # string
        return out + gguf_str(value)
    elem, items = value  # array
    out += struct.pack("<IQ", elem, len(items))
    for it in items:
        out += gguf_str(it) if elem == 8 else struct.pack("<i", it)
    return out


vocab = [chr(c) for c in range(ord("a"), ord("a") + 26)] + ["ab", "abc", "Ġ", "Ġa", "<|endoftext|>", "<|im_start|>"]
kvs = [gguf_kv("general.architecture", 8, "llama"), gguf_kv("llama.block_count", 4, 1),
       gguf_kv("llama.embedding_length", 4, 16), gguf_kv("llama.feed_forward_length", 4, 32),
       gguf_kv("llama.attention.head_count", 4, 2), gguf_kv("llama.attention.head_count_kv", 4, 1),
       gguf_kv("llama.context_length", 4, 64), gguf_kv("llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
       gguf_kv("llama.rope.freq_base", 6, 10000.0), gguf_kv("tokenizer.ggml.model", 8, "gpt2"),
       gguf_kv("tokenizer.ggml.pre", 8, "default"), gguf_kv("tokenizer.ggml.tokens", 9, (8, vocab)),
       gguf_kv("tokenizer.ggml.token_type", 9, (5, [1] * 30 + [3, 3])),
       gguf_kv("tokenizer.ggml.merges", 9, (8, ["a b", "ab c", "Ġ a"])),
       gguf_kv("tokenizer.ggml.eos_token_id", 4, 30)]
gguf_names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "model.layers.0.input_layernorm.weight": "blk.0.attn_norm.weight",
              "model.layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
              "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
              "model.layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
              "model.layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
              "model.layers.0.self_attn.o_proj.weight": "blk.0.attn_output.weight",
              "model.layers.0.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
              "model.layers.0.mlp.up_proj.weight": "blk.0.ffn_up.weight",
              "model.layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight"}
infos, data = b"", b""
for hf, gg in gguf_names.items():
    dt, shape, raw = tensors[hf]
    ftype = 0
    if "blk.0.ffn" in gg and "norm" not in gg:  # some F16, as files mix types
        vals = struct.unpack(f"<{len(raw) // 4}f", raw)
        raw, ftype = struct.pack(f"<{len(vals)}e", *vals), 1
    data += b"\0" * (-len(data) % 32)
    infos += gguf_str(gg) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
    infos += struct.pack("<IQ", ftype, len(data))
    data += raw
head = b"GGUF" + struct.pack("<IQQ", 3, len(gguf_names), len(kvs)) + b"".join(kvs) + infos
head += b"\0" * (-len(head) % 32)
put("gguf", "micro-llama.gguf", head + data)
shutil.rmtree(tmp)
