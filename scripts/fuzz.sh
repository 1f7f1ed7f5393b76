#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer harnesses of tests/fuzz (clang, AddressSanitizer + UBSan, in build-fuzz/) and
# runs each for a bounded time from its seed corpus; fails on any finding (crash, sanitizer report, leak,
# timeout, out of memory, a rejection that is not one line). Installs clang when it is missing.
#   scripts/fuzz.sh                       every harness, FUZZ_SECONDS (30) each
#   FUZZ_SECONDS=300 FUZZ_SEED=0 scripts/fuzz.sh gguf tokenizer     some harnesses, longer, a random seed
# New inputs that reach new code go to build-fuzz/corpus/<harness>/ (the committed seeds stay as they are);
# a finding is written to build-fuzz/findings/ and reproduced by ./build-fuzz/fuzz_<harness> FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
# A fixed seed: from the same corpus the same inputs come in the same order, so a run that passed here passes
# on a machine like this one (a faster one goes further); FUZZ_SEED=0 lets libFuzzer pick one.
seed=${FUZZ_SEED:-1}
build=${FUZZ_BUILD_DIR:-build-fuzz}

# harness -> -max_len (above its largest seed, so seeds are not cut; small enough to mutate quickly)
declare -A max_len=(
  [safetensors]=4096 [safetensors_index]=4096 [model_config]=4096 [config_yaml]=8192 [config_json]=8192
  [tokenizer]=16384 [dataset_line]=4096 [chat_template]=4096 [lora]=16384 [checkpoint]=32768
  [bnb_checkpoint]=32768 [gguf]=32768
)
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(safetensors safetensors_index model_config config_yaml config_json tokenizer
                                          dataset_line chat_template lora checkpoint bnb_checkpoint gguf)

# clang with its libFuzzer runtime and OpenMP library (Debian: clang, libclang-rt-N-dev, libomp-N-dev)
fuzzer_works() {
  echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$1/probe.c"
  clang -fsanitize=fuzzer,address,undefined -fopenmp "$1/probe.c" -o "$1/probe" >/dev/null 2>&1
}
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! command -v clang >/dev/null 2>&1 || ! fuzzer_works "$probe"; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq clang >/dev/null
  v=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "libclang-rt-$v-dev" "libomp-$v-dev" >/dev/null 2>&1 ||
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "libomp-$v-dev" >/dev/null
  fuzzer_works "$probe" || { echo "fuzz: clang cannot build a libFuzzer binary (needs libclang-rt-$v-dev)" >&2; exit 1; }
fi

jobs=$(nproc 2>/dev/null || echo 2)
CC=clang cmake -S . -B "$build" -DQLT_FUZZ=ON -DQLT_CUDA=OFF -DQLT_TESTS=OFF -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS_DEBUG="-O1 -g" >/dev/null
targets=()
for h in "${harnesses[@]}"; do
  [ -n "${max_len[$h]:-}" ] || { echo "fuzz: no harness '$h' (one of: ${!max_len[*]})" >&2; exit 2; }
  targets+=("fuzz_$h")
done
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/findings"
failed=()
for h in "${harnesses[@]}"; do
  corpus="$build/corpus/$h"
  mkdir -p "$corpus"
  log="$build/fuzz_$h.log"
  start=$(date +%s)
  set +e
  "$build/fuzz_$h" -max_total_time="$seconds" -max_len="${max_len[$h]}" -rss_limit_mb=2048 -timeout=10 -seed="$seed" \
    -print_final_stats=1 -artifact_prefix="$build/findings/$h-" "$corpus" "tests/fuzz/$h" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz: $h: ${execs:-?} executions in $(( $(date +%s) - start )) s, no finding"
  else
    echo "fuzz: $h: FINDING (exit $rc) after ${execs:-?} executions; log $log:" >&2
    grep -E "ERROR|SUMMARY|Test unit written|fuzz: a rejection" "$log" | head -5 >&2 || tail -20 "$log" >&2
    failed+=("$h")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (inputs in $build/findings/; reproduce: ./$build/fuzz_<harness> FILE)" >&2
  exit 1
fi
echo "fuzz: ${#harnesses[@]} harnesses, $seconds s each, no finding"
