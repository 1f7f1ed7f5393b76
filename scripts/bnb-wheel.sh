# bnb-wheel.sh: sourced by the GPU-machine scripts that need bitsandbytes, which that machine lacks:
# use_bnb_wheel unpacks the wheel `scripts/package-gpu.sh --bnb` put in .whl/ into /tmp/site, puts it on
# PYTHONPATH and returns 0 when `import bitsandbytes` then works (1 when there is no wheel or it fails).
use_bnb_wheel() {
  ls .whl/bitsandbytes-*.whl >/dev/null 2>&1 || return 1
  # unpacked directly: the slimmed wheel's RECORD no longer lists every file, which pip refuses
  python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in glob.glob('.whl/bitsandbytes-*.whl')]" \
    || return 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "import bitsandbytes" 2>/dev/null
}
