#!/usr/bin/env bash
# setup.sh: installs what the build needs (Debian/Ubuntu packages) when it is missing, then builds
# build/qlora-train (with the CUDA backend when nvcc is found). Safe to run again: it only does what
# is missing, and the build is incremental.
#   scripts/setup.sh            release build in build/
#   BUILD_DIR=x CMAKE_ARGS=... scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# libopenblas-openmp-dev before libopenblas-dev: the OpenMP build of OpenBLAS is the one the meta package then
# takes (it shares the CPU backend's OpenMP threads instead of starting threads of its own)
packages=(cmake make gcc pkg-config libcjson-dev libyaml-dev zlib1g-dev libpcre2-dev libutf8proc-dev libcriterion-dev
          libopenblas-openmp-dev libopenblas-dev)
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

build_dir=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$jobs"
echo "setup: built $build_dir/qlora-train"
