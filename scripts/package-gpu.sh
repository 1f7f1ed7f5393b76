#!/usr/bin/env bash
# package-gpu.sh: on the development machine (no GPU), builds the release with CUDA and gathers what a
# GPU-machine run needs into carry/ (ignored by git; named in the device call's `carry`):
#   carry/bin/     qlora-train, qlt_gpu_check and the shared libraries the GPU machine lacks (rpath $ORIGIN),
#                  libkernel_trace.so (tools/kernel_trace.c) with the CUPTI it was built against, and
#                  gemm_probe (tools/gemm_probe.cu), gemm_beta_probe (tools/gemm_beta_probe.cu),
#                  nf4_gemm_probe (tools/nf4_gemm_probe.cu), l2_ring_probe (tools/l2_ring_probe.cu) and
#                  attention_wgmma_probe (tools/attention_wgmma_probe.cu)
#   carry/models/  config.json of the real models of ../shared/models (random-weight benchmarks)
#   carry/assets/  with --assets: sotu.jsonl and the real Qwen3 / Llama-3 tokenizers (tokenizer benchmark)
#   .whl/          with --bnb: the bitsandbytes 0.49.2 wheel from PyPI, slimmed to its CUDA 13.0 library (the GPU
#                  machine has no bitsandbytes; scripts/gpu-check-nf4.sh and HF_QUANT=nf4 bench-vs-hf.sh use it)
#   scripts/package-gpu.sh [--assets] [--bnb]   (--assets only as the first argument; SHARED_DIR=../shared)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build scripts/setup.sh >/dev/null
rm -rf carry
mkdir -p carry/bin carry/models
cp build/qlora-train build/qlt_gpu_check carry/bin/
libdir=$(dirname "$(ldconfig -p | awk '/libcjson.so.1 / {print $NF; exit}')")
# (OpenBLAS, the CPU backend's products, with the Fortran runtime it links)
for lib in libcjson.so.1 libyaml-0.so.2 libpcre2-8.so.0 libutf8proc.so.2 libz.so.1 libgomp.so.1 libopenblas.so.0 \
           libgfortran.so.5 libquadmath.so.0; do
  cp -L "$libdir/$lib" carry/bin/
done
# the kernel tracer (scripts/trace-step.sh) when CUPTI's headers are here; it runs with the GPU machine's CUPTI
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ -f "$cuda_home/include/cupti.h" ]; then
  cupti=$(ls "$cuda_home"/lib/libcupti.so.* "$cuda_home"/lib64/libcupti.so.* "$cuda_home"/extras/CUPTI/lib64/libcupti.so.* 2>/dev/null | head -1 || true)
  [ -n "$cupti" ] && gcc -O2 -shared -fPIC -I"$cuda_home/include" tools/kernel_trace.c "$cupti" -Wl,-rpath,'$ORIGIN' \
    -o carry/bin/libkernel_trace.so && cp -L "$cupti" carry/bin/
fi
# the GEMM kernel probe (tools/gemm_probe.cu): cuBLAS's choice against cuBLASLt's candidates on 7B shapes
nvcc=$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
"$nvcc" -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a tools/gemm_probe.cu -lcublasLt -lcublas -ldl \
  -o carry/bin/gemm_probe
# what reading a GEMM's output costs (tools/gemm_beta_probe.cu): beta 0 / 1, the adapters' products, the k/v fold
"$nvcc" -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a tools/gemm_beta_probe.cu -lcublas -o carry/bin/gemm_beta_probe
# the NF4-dequantizing GEMM (tools/nf4_gemm.cu, an experiment the trainer does not use) against dequantize + cuBLAS
# (tools/nf4_gemm_probe.cu), linked with the release's library
"$nvcc" -O2 -std=c++17 -Isrc -gencode arch=compute_90a,code=sm_90a tools/nf4_gemm_probe.cu tools/nf4_gemm.cu tools/nf4_gemm_rs.cu build/libqlt.a -lcublasLt \
  -lcublas -lz -lgomp -Xlinker -rpath -Xlinker '$ORIGIN' -o carry/bin/nf4_gemm_probe
# the dequantized weight kept in L2 by row chunks (tools/l2_ring_probe.cu): time and energy against the whole weight
"$nvcc" -O2 -std=c++17 -Isrc -gencode arch=compute_90a,code=sm_90a tools/l2_ring_probe.cu build/libqlt.a -lcublas \
  -lz -lgomp -ldl -Xlinker -rpath -Xlinker '$ORIGIN' -o carry/bin/l2_ring_probe
# the Hopper attention kernels moved out of the product (tools/attention_*_wgmma.cu) against its own kernels
"$nvcc" -O2 -std=c++17 -Isrc -Itools -gencode arch=compute_90a,code=sm_90a tools/attention_wgmma_probe.cu \
  tools/attention_fwd_wgmma.cu tools/attention_bwd_wgmma.cu build/libqlt.a -lcublasLt -lcublas -lz -lgomp -ldl \
  -Xlinker -rpath -Xlinker '$ORIGIN' -o carry/bin/attention_wgmma_probe
shared=${SHARED_DIR:-../shared}
for d in "$shared"/models/*/; do
  [ -f "$d/config.json" ] && cp "$d/config.json" "carry/models/$(basename "$d").json"
done
for arg in "$@"; do [ "$arg" = "--bnb" ] && bnb=1; done
if [ -n "${bnb:-}" ] && ! ls .whl/bitsandbytes-0.49.2-*.whl >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  pip download bitsandbytes==0.49.2 --no-deps --only-binary=:all: --platform manylinux_2_24_x86_64 \
    --python-version 3.12 -d "$tmp" >/dev/null
  mkdir -p .whl
  python3 - "$tmp"/bitsandbytes-0.49.2-*.whl .whl <<'PY'
import os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(os.path.join(dst, os.path.basename(src)), "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        name = item.filename
        if name.endswith(".so") and not name.endswith(("_cuda130.so", "_cpu.so")):
            continue  # the other CUDA / ROCm builds (the GPU machine has CUDA 13.0)
        zout.writestr(item, zin.read(name))
PY
  rm -rf "$tmp"
fi
if [ "${1:-}" = "--assets" ]; then
  mkdir -p carry/assets
  cp "$shared/assets/text/sotu.jsonl" carry/assets/
  cp "$shared/assets/tokenizers/qwen3/tokenizer.json" carry/assets/qwen3-tokenizer.json
  cp "$shared/assets/tokenizers/llama3/tokenizer.json" carry/assets/llama3-tokenizer.json
fi
du -sh carry
