#!/usr/bin/env python3
"""gguf_merge_check.py: `qlora-train merge --format gguf` against the safetensors merge of the same model.

For each tiny fixture (tiny-llama, tiny-qwen2, tiny-qwen3, and tiny-llama with Llama 3 RoPE scaling) it
builds a model directory (the fixture's config.json + model.safetensors and a byte-level BPE tokenizer cut
from tok-llama3style / tok-qwen2style to the model's vocab_size), merges the fixture's adapter-init onto the
NF4 base into safetensors (f32, f16, bf16) and GGUF (f32, f16, bf16, q8_0), reads each GGUF file back with
the `gguf` package (pip install gguf numpy) and compares every tensor with the safetensors merge:
  - F32 / F16 / BF16 matrices: equal to the safetensors merge in the same dtype, bit for bit (llama q/k
    rows un-permuted first); 1-D tensors F32 and equal to the f32 merge;
  - Q8_0: bytes equal to gguf.quants.quantize(f32 merge) (the package's bit-exact copy of ggml's
    reference quantize_row_q8_0), and dequantized within half a step (d / 2) of the f32 merge;
  - metadata: architecture, hyper-parameters, tokens, token types, merges, bos / eos; rope_freqs for Llama 3.
With llama-cpp-python importable (pip install llama-cpp-python builds llama.cpp), llama.cpp also loads every
GGUF file and its logits (F32 KV cache) are compared with a float64 numpy forward of the f32 safetensors merge
(Hugging Face semantics): 1e-4 of the logits' max for F32, 1e-2 for F16, 3e-2 for BF16, 6e-2 for Q8_0 (whose
matrix products llama.cpp runs on activations rounded to 8 bits as well); a wrong name, permutation or RoPE
moves them by far more.
Prints a table of the largest differences; exit 1 on a failure.

    python3 scripts/gguf_merge_check.py [--binary build/qlora-train] [--fixtures tests/data/fixtures]
                                        [--tokenizers ../shared/fixtures] [--keep DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import quants

HERE = os.path.dirname(os.path.abspath(__file__))


def read_safetensors_dir(path):
    """Every tensor of a model directory (one file or an index) as float32 numpy arrays (BF16 too)."""
    index = os.path.join(path, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out, raw = {}, {}
    for name in files:
        with open(os.path.join(path, name), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
            data = f.read()
        for key, e in header.items():
            if key == "__metadata__":
                continue
            b, end = e["data_offsets"]
            buf = data[b:end]
            dt = e["dtype"]
            if dt == "F32":
                a = np.frombuffer(buf, np.float32)
            elif dt == "F16":
                a = np.frombuffer(buf, np.float16).astype(np.float32)
            elif dt == "BF16":
                a = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                raise SystemExit(f"{name}: {key} has dtype {dt}")
            out[key] = a.reshape(e["shape"])
            raw[key] = (dt, np.frombuffer(buf, np.uint8))
    return out, raw


def gguf_name(hf):
    table = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
             "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
             "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
             "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
             "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
             "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".", 3)
    return f"blk.{parts[2]}.{table[parts[3]]}"


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half rows -> interleaved pairs, per head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_tokenizer(src_dir, vocab_size, out_dir):
    """The fixture tokenizer cut to ids < vocab_size - 3 (merges whose parts and result survive), with its
    three added tokens moved to the last ids."""
    tok = json.load(open(os.path.join(src_dir, "tokenizer.json")))
    keep = vocab_size - len(tok["added_tokens"])
    vocab = {t: i for t, i in tok["model"]["vocab"].items() if i < keep}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    tok["model"]["vocab"], tok["model"]["merges"] = vocab, merges
    for k, a in enumerate(tok["added_tokens"]):
        a["id"] = keep + k
    json.dump(tok, open(os.path.join(out_dir, "tokenizer.json"), "w"))
    json.dump({"eos_token": tok["added_tokens"][0]["content"], "pad_token": tok["added_tokens"][0]["content"],
               "add_bos_token": False}, open(os.path.join(out_dir, "tokenizer_config.json"), "w"))
    return tok


def np_forward(w, cfg, ids):
    """Hugging Face forward of a Llama / Qwen2 / Qwen3 model in float64: logits [seq, vocab]."""
    f = {k: v.astype(np.float64) for k, v in w.items()}
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    inv = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if rs.get("rope_type") == "llama3":
        lo, hi, fac, old = rs["low_freq_factor"], rs["high_freq_factor"], rs["factor"], rs["original_max_position_embeddings"]
        wl = 2 * np.pi / inv
        smooth = (old / wl - lo) / (hi - lo)
        inv = np.where(wl < old / hi, inv, np.where(wl > old / lo, inv / fac, (1 - smooth) * inv / fac + smooth * inv))
    S = len(ids)
    ang = np.arange(S)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    def rope(x):  # [S, heads, hd]
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    x = f["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, f[p + "input_layernorm.weight"])
        q = h @ f[p + "self_attn.q_proj.weight"].T + f.get(p + "self_attn.q_proj.bias", 0)
        k = h @ f[p + "self_attn.k_proj.weight"].T + f.get(p + "self_attn.k_proj.bias", 0)
        v = h @ f[p + "self_attn.v_proj.weight"].T + f.get(p + "self_attn.v_proj.bias", 0)
        q, k, v = q.reshape(S, nh, hd), k.reshape(S, nkv, hd), v.reshape(S, nkv, hd)
        if p + "self_attn.q_norm.weight" in f:
            q, k = rms(q, f[p + "self_attn.q_norm.weight"]), rms(k, f[p + "self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        rep = nh // nkv
        k, v = np.repeat(k, rep, 1), np.repeat(v, rep, 1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
        s = s + np.triu(np.full((S, S), -np.inf), 1)[None]
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", s, v).reshape(S, nh * hd)
        x = x + o @ f[p + "self_attn.o_proj.weight"].T
        h = rms(x, f[p + "post_attention_layernorm.weight"])
        g, u = h @ f[p + "mlp.gate_proj.weight"].T, h @ f[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ f[p + "mlp.down_proj.weight"].T
    x = rms(x, f["model.norm.weight"])
    head = f["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else f["lm_head.weight"]
    return x @ head.T


def llama_cpp_logits(path, ids):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, logits_all=True, verbose=False, n_threads=2,
                          type_k=0, type_v=0)  # ggml F32 KV cache
    llm.eval(list(ids))
    out = np.array(llm.scores[: len(ids)], dtype=np.float64)
    llm.close()
    return out


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout}{p.stderr}")


def check_model(args, name, work, rope_llama3=False):
    fx = os.path.join(args.fixtures, name)
    cfg = json.load(open(os.path.join(fx, "config.json")))
    tag = name + ("-llama3rope" if rope_llama3 else "")
    mdir = os.path.join(work, tag, "model")
    os.makedirs(mdir)
    if rope_llama3:
        cfg["rope_parameters"] = {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    json.dump(cfg, open(os.path.join(mdir, "config.json"), "w"))
    shutil.copy(os.path.join(fx, "model.safetensors"), mdir)
    toks = make_tokenizer(os.path.join(args.tokenizers, "tok-llama3style" if name == "tiny-llama" else "tok-qwen2style"),
                          cfg["vocab_size"], mdir)
    conf = os.path.join(work, tag, "merge.yaml")
    open(conf, "w").write(f"model: {{path: {mdir}, quant: nf4}}\n")
    adapter = os.path.join(fx, "adapter-init")
    st = {}
    for dt in ["f32", "f16", "bf16"]:
        out = os.path.join(work, tag, f"st-{dt}")
        run([args.binary, "merge", "--config", conf, "--adapter", adapter, "--out", out, "--dtype", dt])
        st[dt] = read_safetensors_dir(out)
    arch = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}[cfg["model_type"]]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    rows = []
    ok = True
    f32_values = st["f32"][0]
    for dt in ["f32", "f16", "bf16", "q8_0"]:
        path = os.path.join(work, tag, f"m-{dt}.gguf")
        run([args.binary, "merge", "--config", conf, "--adapter", adapter, "--out", path, "--format", "gguf",
             "--dtype", dt])
        r = gguf.GGUFReader(path)
        tensors = {t.name: t for t in r.tensors}
        expected = {gguf_name(k) for k in f32_values} | ({"rope_freqs.weight"} if rope_llama3 else set())
        if set(tensors) != expected:
            print(f"{tag} {dt}: tensors differ: extra {set(tensors) - expected}, missing {expected - set(tensors)}")
            ok = False
        worst, worst_q8_steps, bit_mismatch = 0.0, 0.0, 0
        for hf, ref in f32_values.items():
            t = tensors[gguf_name(hf)]
            shape = tuple(int(s) for s in reversed(t.shape))
            perm = nh if ".q_proj." in hf else nkv if ".k_proj." in hf else 0
            if ref.ndim == 1 or dt == "f32":
                want_type = "F32"
            else:
                want_type = dt.upper()
            if t.tensor_type.name != want_type:
                print(f"{tag} {dt}: {t.name} is {t.tensor_type.name}, expected {want_type}")
                ok = False
                continue
            if t.tensor_type.name == "Q8_0":
                expect_ref = permute(ref, perm) if arch == "llama" and perm else ref
                want = quants.quantize(expect_ref.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
                got = np.asarray(t.data).reshape(want.shape)
                bit_mismatch += int((got != want).sum())
                deq = quants.dequantize(got, gguf.GGMLQuantizationType.Q8_0).reshape(shape)
                if arch == "llama" and perm:
                    deq = unpermute(deq, perm)
                # codes round(x / d) with the float32 d, stored with d in float16: |x - q * d16| <= d / 2 + 127 |d - d16|
                d = np.abs(ref.astype(np.float32)).reshape(-1, 32).max(1) / np.float32(127)
                d16 = d.astype(np.float16).astype(np.float64)
                bound = d / 2 + 127 * np.abs(d - d16)
                err = np.abs(deq - ref).reshape(-1, 32).max(1)
                worst = max(worst, float(err.max()))
                worst_q8_steps = max(worst_q8_steps, float((err / np.where(bound > 0, bound, 1)).max()))
                continue
            got = np.asarray(t.data)
            if t.tensor_type.name == "BF16":
                got = (got.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            got = got.astype(np.float32).reshape(shape)
            if arch == "llama" and perm:
                got = unpermute(got, perm)
            same = st[dt][0][hf] if ref.ndim == 2 else ref
            diff = float(np.abs(got - same).max())
            worst = max(worst, float(np.abs(got - ref).max()))
            if diff != 0:
                print(f"{tag} {dt}: {t.name} differs from the safetensors {dt} merge by {diff:.3g}")
                ok = False
        if rope_llama3:
            f = np.asarray(tensors["rope_freqs.weight"].data, dtype=np.float64)
            hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
            inv = 1.0 / (500000.0 ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
            wl = 2 * np.pi / inv
            sm = (64 / wl - 1.0) / 3.0
            want = np.where(wl < 16, 1.0, np.where(wl > 64, 8.0, 1 / ((1 - sm) / 8.0 + sm)))
            if np.abs(f - want).max() > 1e-5 * 8:
                print(f"{tag}: rope_freqs {f} vs {want}")
                ok = False
        kv = {k: f.contents() for k, f in r.fields.items()}
        want_kv = {"general.architecture": arch, f"{arch}.block_count": cfg["num_hidden_layers"],
                   f"{arch}.embedding_length": cfg["hidden_size"], f"{arch}.feed_forward_length": cfg["intermediate_size"],
                   f"{arch}.attention.head_count": nh, f"{arch}.attention.head_count_kv": nkv,
                   f"{arch}.context_length": cfg["max_position_embeddings"], "tokenizer.ggml.model": "gpt2",
                   "tokenizer.ggml.pre": "llama-bpe" if arch == "llama" else "qwen2",
                   "tokenizer.ggml.eos_token_id": toks["added_tokens"][0]["id"],
                   f"{arch}.attention.key_length": cfg.get("head_dim")}
        for k, v in want_kv.items():
            if kv.get(k) != v:
                print(f"{tag} {dt}: {k} = {kv.get(k)!r}, expected {v!r}")
                ok = False
        inv_vocab = {i: t for t, i in toks["model"]["vocab"].items()}
        for a in toks["added_tokens"]:
            inv_vocab[a["id"]] = a["content"]
        tokens = kv["tokenizer.ggml.tokens"]
        if len(tokens) != cfg["vocab_size"] or any(tokens[i] != inv_vocab.get(i, f"[PAD{i}]") for i in range(len(tokens))):
            print(f"{tag} {dt}: tokenizer.ggml.tokens differ from tokenizer.json")
            ok = False
        want_merges = [m if isinstance(m, str) else " ".join(m) for m in toks["model"]["merges"]]
        if kv["tokenizer.ggml.merges"] != want_merges:
            print(f"{tag} {dt}: tokenizer.ggml.merges differ")
            ok = False
        if abs(kv[f"{arch}.rope.freq_base"] - np.float32(cfg["rope_parameters"]["rope_theta"])) != 0:
            print(f"{tag} {dt}: rope.freq_base {kv[f'{arch}.rope.freq_base']}")
            ok = False
        note = f"Q8_0 bytes differing from gguf.quants: {bit_mismatch}, max err / its bound {worst_q8_steps:.3f}" \
            if dt == "q8_0" else "bit-equal to the safetensors merge of this dtype"
        if dt == "q8_0" and (bit_mismatch or worst_q8_steps > 1.0 + 1e-3):
            ok = False
        rows.append((tag, dt.upper(), worst, note))
        if args.llama_cpp:
            ids = np.arange(3, 3 + 24) % cfg["vocab_size"]
            ref_logits = np_forward(f32_values, cfg, ids)
            got_logits = llama_cpp_logits(path, ids)
            rel = float(np.abs(got_logits - ref_logits).max() / np.abs(ref_logits).max())
            # Q8_0: llama.cpp also rounds the activations to 8 bits for its Q8_0 x Q8_0 dot products
            tol = {"f32": 1e-4, "f16": 1e-2, "bf16": 3e-2, "q8_0": 6e-2}[dt]
            rows.append((tag, f"llama.cpp {dt.upper()}", rel,
                         f"llama.cpp's logits vs a float64 forward of the f32 merge (rel. to max; tolerance {tol:g})"))
            if rel > tol:
                ok = False
    return ok, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(HERE, "..", "build", "qlora-train"))
    ap.add_argument("--fixtures", default=os.path.join(HERE, "..", "tests", "data", "fixtures"))
    ap.add_argument("--tokenizers", default=os.path.join(HERE, "..", "..", "shared", "fixtures"))
    ap.add_argument("--keep", help="work directory to keep (default: a temporary one)")
    args = ap.parse_args()
    try:
        import llama_cpp  # noqa: F401
        args.llama_cpp = True
    except ImportError:
        args.llama_cpp = False
        print("llama-cpp-python not importable: llama.cpp's own load and logits are not checked")
    work = args.keep or tempfile.mkdtemp(prefix="gguf-merge-check-")
    all_ok, rows = True, []
    for name, l3 in [("tiny-llama", False), ("tiny-qwen2", False), ("tiny-qwen3", False), ("tiny-llama", True)]:
        ok, r = check_model(args, name, work, l3)
        all_ok &= ok
        rows += r
    print(f"{'model':<22} {'type':<10} {'max |gguf - f32 merge|':>22}  note")
    for tag, dt, worst, note in rows:
        print(f"{tag:<22} {dt:<10} {worst:>22.3g}  {note}")
    if not args.keep:
        shutil.rmtree(work)
    print("OK" if all_ok else "FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
