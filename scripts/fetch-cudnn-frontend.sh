#!/usr/bin/env bash
# fetch-cudnn-frontend.sh: puts NVIDIA's cudnn-frontend headers (header-only C++, MIT licence; the API the
# cuDNN attention path is written against) into third_party/cudnn-frontend/include, from the
# nvidia-cudnn-frontend wheel on PyPI. Only the CUDA build uses them; without them it builds the own
# attention kernels alone. Safe to run again: does nothing when the headers are there.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${CUDNN_FRONTEND_VERSION:-1.32.0}
dest=third_party/cudnn-frontend
if [ -f "$dest/include/cudnn_frontend.h" ]; then exit 0; fi
if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
  echo "fetch-cudnn-frontend: no pip here: the build goes on without cuDNN attention" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$version" >&2; then
  echo "fetch-cudnn-frontend: could not download nvidia-cudnn-frontend $version: the build goes on without cuDNN attention" >&2
  exit 1
fi
mkdir -p "$dest"
python3 - "$tmp" "$dest" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("include/"):
            z.extract(name, sys.argv[2])
PY
echo "fetch-cudnn-frontend: cudnn-frontend $version headers in $dest/include" >&2
