#!/usr/bin/env python3
"""bench_tokenizer_hf.py: single-thread speed of Hugging Face `tokenizers` on the same text and with the
same measure as `qlora-train tokenize --bench` (the "text" field of every JSONL line, texts in memory,
encode(text, add_special_tokens=False) one text after another, best of --repeat runs). Prints one JSON
line with the same fields as the C side."""
import argparse
import json
import os
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers is imported
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer, __version__  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json")
    ap.add_argument("--text", required=True, help="JSONL file with a \"text\" field per line")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tok = Tokenizer.from_file(a.tokenizer)
    texts = []
    with open(a.text, encoding="utf-8") as f:
        for line in f:
            v = json.loads(line)
            t = v if isinstance(v, str) else v.get("text")
            if isinstance(t, str):
                texts.append(t)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    best, n_tokens = float("inf"), 0
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        n_tokens = sum(len(tok.encode(t, add_special_tokens=False).ids) for t in texts)
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"impl": f"hf-tokenizers {__version__}", "texts": len(texts), "bytes": n_bytes,
                      "tokens": n_tokens, "threads": 1, "seconds": round(best, 4),
                      "MB_per_s": round(n_bytes / best / 1e6, 2), "tokens_per_s": round(n_tokens / best)}))


if __name__ == "__main__":
    main()
