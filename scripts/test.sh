#!/usr/bin/env bash
# test.sh: checks the include rules (scripts/check-includes.py), installs what is missing, builds the tests
# under AddressSanitizer + UBSan (CPU path, the one CI can run), and runs every Criterion test; then runs
# every libFuzzer harness for FUZZ_SECONDS (30) each (scripts/fuzz.sh; QLT_SKIP_FUZZ=1 skips it). Also checks
# that the release build (with CUDA when nvcc is present) compiles. Exit status is the tests' (then the
# fuzzing's).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/check-includes.py   # includes point down (docs/ARCHITECTURE.md, "Folders")
scripts/setup.sh
BUILD_DIR=build-asan CMAKE_ARGS="-DQLT_SANITIZE=ON -DQLT_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug" scripts/setup.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Criterion's runner leaks when tests with different time limits overlap (LeakSanitizer then fails the run):
# every limit is QLT_TEST_TIMEOUT_S (tests/unit/test_util.h).
if grep -nE '\.timeout *= *[0-9]' tests/unit/*.c; then
    echo "test.sh: a test sets its own .timeout: use .timeout = QLT_TEST_TIMEOUT_S (tests/unit/test_util.h)" >&2
    exit 1
fi
jobs=$(nproc 2>/dev/null || echo 2)
./build-asan/qlt_tests --jobs "$jobs" "$@"
[ -n "${QLT_SKIP_FUZZ:-}" ] || scripts/fuzz.sh
