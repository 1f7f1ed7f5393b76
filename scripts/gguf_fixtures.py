#!/usr/bin/env python3
"""gguf_fixtures.py: writes the GGUF test fixtures of tests/data/gguf with llama.cpp's own gguf-py.

Run once (its outputs are committed; tests/unit/test_gguf.c reads them):
  python3 -m venv .cache/venv && .cache/venv/bin/pip install gguf numpy
  .cache/venv/bin/python scripts/gguf_fixtures.py [OUT_DIR]

Writes:
  types.gguf                    one tensor of every type qlora-train dequantizes (F32, F16, BF16, Q8_0,
                                Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), random but valid blocks (random
                                bytes, float16 scales finite), plus a key/value of every GGUF value type
  types.expected.safetensors    gguf-py's dequantization of each tensor (F32, same names)
  tiny-llama.f32.gguf           tests/data/fixtures/tiny-llama converted as llama.cpp's converter does it
                                (GGUF names, attn_q / attn_k rows permuted for its RoPE), F32
  tiny-llama.q4_1.gguf          the same, linear weights Q4_1, token_embd Q8_0, output Q5_1
  tiny-llama.q4_1.expected.safetensors   gguf-py's dequantization of every q/k weight (the permutation
                                undone) and of the embedding, with Hugging Face names and layout
  tiny-qwen2.bf16.gguf, tiny-qwen3.bf16.gguf   the BF16 fixtures (model.bf16.safetensors), 1-D tensors F32
                                (as llama.cpp writes norms and biases); qwen2's with general.alignment 64
  tok-qwen2style.gguf, tok-llama3style.gguf, tok-smollm2.gguf   tokenizer metadata only (tokens, token
                                types, merges, pre-tokenizer name, eos/pad ids, chat template), as the
                                converter writes it
"""
import json
import os
import struct
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "tests", "data", "fixtures")


# ---- safetensors (numpy only) ----

def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = {"F32": np.float32, "BF16": np.uint16, "F16": np.float16}[info["dtype"]]
        out[name] = (info["dtype"], np.frombuffer(data[b:e], dtype=dt).reshape(info["shape"]))
    return out


def st_write(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + arr.nbytes]}
        blobs.append(arr.tobytes())
        off += arr.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


# ---- llama.cpp's q/k row permutation (convert_hf_to_gguf.py, LlamaModel.permute) ----

def permute(w, n_head, n_head_kv):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---- types.gguf ----

def random_half(rng, n):
    """n random float16 bit patterns that are finite (any sign, subnormals and zeros included)."""
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    bad = (h & 0x7C00) == 0x7C00
    h[bad] &= 0xBBFF  # clear one exponent bit: finite
    return h


# where each type keeps its float16 scales inside a block: (byte offset, count)
HALF_FIELDS = {T.Q4_0: (0, 1), T.Q4_1: (0, 2), T.Q5_0: (0, 1), T.Q5_1: (0, 2), T.Q8_0: (0, 1),
               T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208, 1)}


def write_types(out):
    rng = np.random.default_rng(20240611)
    w = gguf.GGUFWriter(os.path.join(out, "types.gguf"), "llama")
    expected = {}
    rows, cols = 3, 512
    for qt in [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K]:
        name = "t." + qt.name.lower()
        if qt == T.F32:
            vals = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(3)
            raw = vals.view(np.uint8).reshape(rows, -1)
        elif qt == T.F16:
            raw = random_half(rng, rows * cols).view(np.uint8).reshape(rows, -1)
        elif qt == T.BF16:
            b = rng.integers(0, 1 << 16, size=rows * cols, dtype=np.uint32).astype(np.uint16)
            b[(b & 0x7F80) == 0x7F80] &= 0xFF7F  # finite
            raw = b.view(np.uint8).reshape(rows, -1)
        else:
            block, size = gguf.GGML_QUANT_SIZES[qt]
            nb = rows * cols // block
            blocks = rng.integers(0, 256, size=(nb, size), dtype=np.uint16).astype(np.uint8)
            off, count = HALF_FIELDS[qt]
            blocks[:, off:off + 2 * count] = random_half(rng, nb * count).view(np.uint8).reshape(nb, 2 * count)
            raw = blocks.reshape(rows, -1)
        w.add_tensor(name, raw, raw_dtype=qt)
        expected[name] = dequantize(raw, qt).reshape(rows, cols)
    # one key/value of every value type, arrays (nested too) included
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 1.5)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "h\u00e9llo")
    w.add_uint64("test.u64", 1 << 40)
    w.add_int64("test.i64", -(1 << 40))
    w.add_float64("test.f64", 0.1)
    w.add_array("test.array_i32", [1, -2, 3])
    w.add_array("test.array_str", ["a", "bc", ""])
    w.add_array("test.array_nested", [[1, 2], [3]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    st_write(os.path.join(out, "types.expected.safetensors"), expected)


# ---- the tiny models ----

GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.N.<module...>.<weight|bias>
    return "blk.%s.%s.%s" % (parts[2], GGUF_NAMES[".".join(parts[3:-1])], parts[-1])


def write_model(out, fixture, arch, weights_file, suffix, qtypes=None, alignment=None, expected_names=()):
    """qtypes: GGUF name -> type for 2-D tensors (default F32, or BF16 for a BF16 file); 1-D stay F32."""
    src = os.path.join(FIXTURES, fixture)
    cfg = json.load(open(os.path.join(src, "config.json")))
    tensors = st_read(os.path.join(src, weights_file))
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    tied = cfg.get("tie_word_embeddings", False)
    path = os.path.join(out, "%s.%s.gguf" % (fixture, suffix))
    w = gguf.GGUFWriter(path, arch)
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_name(fixture)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    if head_dim != cfg["hidden_size"] // n_head:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    # a token list as long as the vocabulary (the model loader takes the vocabulary size from it)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(["<tok%d>" % i for i in range(cfg["vocab_size"])])
    expected = {}
    for hf, (dtype, arr) in sorted(tensors.items()):
        if tied and hf == "lm_head.weight":
            continue
        name = gguf_name(hf)
        vals = bf16_to_f32(arr) if dtype == "BF16" else arr.astype(np.float32)
        is_llama = arch in ("llama", "mistral")
        if is_llama and name.endswith("attn_q.weight"):
            vals, arr = permute(vals, n_head, n_head), (permute(arr, n_head, n_head) if dtype == "BF16" else None)
        elif is_llama and name.endswith("attn_k.weight"):
            vals, arr = permute(vals, n_head, n_kv), (permute(arr, n_head, n_kv) if dtype == "BF16" else None)
        qt = (qtypes or {}).get(name.split(".")[-2] if name.startswith("blk.") else name.split(".")[0])
        if vals.ndim == 1:
            w.add_tensor(name, np.ascontiguousarray(vals))
        elif qt is None and dtype == "BF16":
            w.add_tensor(name, np.ascontiguousarray(arr).view(np.uint8).reshape(arr.shape[0], -1), raw_dtype=T.BF16)
        elif qt is None:
            w.add_tensor(name, np.ascontiguousarray(vals))
        else:
            q = quantize(np.ascontiguousarray(vals), qt)
            w.add_tensor(name, q, raw_dtype=qt)
            if hf in expected_names:
                deq = dequantize(q, qt).reshape(vals.shape)
                if name.endswith("attn_q.weight"):
                    deq = unpermute(deq, n_head)
                elif name.endswith("attn_k.weight"):
                    deq = unpermute(deq, n_kv)
                expected[hf] = deq
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if expected_names:
        st_write(os.path.join(out, "%s.%s.expected.safetensors" % (fixture, suffix)), expected)


# ---- tokenizers ----

def write_tokenizer(out, fixture, arch, pre, chat_template, eos="<|endoftext|>", pad="<|im_end|>"):
    tj = json.load(open(os.path.join(FIXTURES, fixture, "tokenizer.json")))
    vocab = tj["model"]["vocab"]
    added = {a["id"]: a for a in tj["added_tokens"]}
    n = max(list(vocab.values()) + list(added)) + 1
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(n):
        if i in added:  # the converter stores added tokens as their text: CONTROL when special
            tokens.append(added[i]["content"])
            types.append(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append("[PAD%d]" % i)
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w = gguf.GGUFWriter(os.path.join(out, fixture + ".gguf"), arch)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(tokens.index(eos))
    w.add_pad_token_id(tokens.index(pad))
    w.add_chat_template(chat_template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "gguf")
    os.makedirs(out, exist_ok=True)
    write_types(out)
    write_model(out, "tiny-llama", "llama", "model.safetensors", "f32")
    linear = {k: T.Q4_1 for k in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")}
    write_model(out, "tiny-llama", "llama", "model.safetensors", "q4_1",
                qtypes=dict(linear, token_embd=T.Q8_0, output=T.Q5_1),
                expected_names=["model.embed_tokens.weight"] +
                ["model.layers.%d.self_attn.%s_proj.weight" % (l, p) for l in range(3) for p in "qk"])
    write_model(out, "tiny-qwen2", "qwen2", "model.bf16.safetensors", "bf16", alignment=64)
    write_model(out, "tiny-qwen3", "qwen3", "model.bf16.safetensors", "bf16")
    write_tokenizer(out, "tok-qwen2style", "qwen2", "qwen2", CHATML)
    write_tokenizer(out, "tok-llama3style", "llama", "llama-bpe", LLAMA3)
    write_tokenizer(out, "tok-smollm2", "llama", "smollm", CHATML, eos="<|im_end|>", pad="<|im_end|>")


if __name__ == "__main__":
    main()
