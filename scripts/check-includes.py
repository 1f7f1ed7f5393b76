#!/usr/bin/env python3
"""check-includes.py: the include rules of src/ (docs/ARCHITECTURE.md, "Folders"), checked in CI.

Every folder of src/ has a layer; a file may include headers of its own folder and of folders on lower
layers only, so includes point down and no two folders include each other. Exit 1 with one line per
broken rule (file:line, what it includes, the two layers), 0 when every include is allowed.
  scripts/check-includes.py [SRC_DIR]
"""
import os
import re
import sys

# The layers, lowest first. A folder may include only from folders on a lower layer (and itself).
LAYERS = [
    ["common"],                                   # errors, dtypes, hashes, files: no project includes
    ["nf4", "config", "tokenizer", "optim"],      # the NF4 codec, the run config, text -> ids, schedules
    ["backend", "formats", "data"],               # the op table + weight type, weight files, datasets
    ["cpu", "cuda", "autograd", "dist"],          # the two backends, the tape, data parallel's communicators
    ["model"],                                    # architectures, weights on a backend, LoRA, forward
    ["infer"],                                    # generation: the KV-cache decoder, sampling, text out
    ["train"],                                    # the training loop, checkpoints, device choice
    ["sweep"],                                    # sweeps: runs of the trainer as child processes, summaries
    ["cli"],                                      # the commands
    ["main.c"],
]
LAYER_OF = {folder: i for i, names in enumerate(LAYERS) for folder in names}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(rel):
    return rel.split("/", 1)[0] if "/" in rel else rel


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    problems = []
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".c", ".h", ".cu", ".cuh", ".cpp")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            here = folder_of(rel)
            if here not in LAYER_OF:
                problems.append(f"src/{rel}: folder '{here}' has no layer in scripts/check-includes.py: add it")
                continue
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    there = folder_of(target)
                    if there == here or "/" not in target:
                        continue
                    if there not in LAYER_OF:
                        problems.append(f"src/{rel}:{lineno}: includes \"{target}\" from unknown folder '{there}'")
                    elif LAYER_OF[there] >= LAYER_OF[here]:
                        problems.append(f"src/{rel}:{lineno}: includes \"{target}\": '{here}' (layer "
                                        f"{LAYER_OF[here]}) may include only lower layers, '{there}' is layer "
                                        f"{LAYER_OF[there]}")
    for p in problems:
        print(p)
    if problems:
        print(f"check-includes: {len(problems)} include(s) against the layering")
        return 1
    print("check-includes: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
