#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...]: builds test/fuzz's targets with clang,
# libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz/ and
# runs each for SECONDS (default 60) from its committed corpus. A finding is
# written to build-fuzz/findings/TARGET/ and the script exits 1; add the input
# to test/fuzz/corpus/TARGET/ once it is fixed, so ctest replays it from then
# on (test/fuzz/README.md). New coverage goes to build-fuzz/corpus/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(json safetensors data job_spec tokenizer tokenizer_json checkpoint hf_import launch_env tokenizer_files resume tokenize)

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: needs clang++ (apt-get install clang)" >&2
  exit 2
fi
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DTRAINER_CUDA=OFF -DTRAINER_FUZZ=ON \
    -DTRAINER_TEST_DIRS=fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined"
fi
ninja -C build-fuzz "${targets[@]/#/fuzz_}"

status=0
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t findings=build-fuzz/findings/$t
  mkdir -p "$work" "$findings"
  seeds=(test/fuzz/corpus/$t)
  [ "$t" = job_spec ] && seeds+=(configs)
  [ "$t" = resume ] && seeds=(test/fuzz/corpus/checkpoint)  # the same input layout
  echo "== $t: ${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 OMP_NUM_THREADS=1 \
      "build-fuzz/test/fuzz/fuzz_$t" "$work" "${seeds[@]}" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=4096 -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 \
      >"build-fuzz/fuzz_$t.log" 2>&1; then
    echo "   FINDING: $(ls -t "$findings" | head -1) (log: build-fuzz/fuzz_$t.log)"
    status=1
  else
    grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "build-fuzz/fuzz_$t.log" | sed 's/^/   /' || true
  fi
done
exit $status
