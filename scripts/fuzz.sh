#!/bin/bash
# Runs lockstep's libFuzzer targets (fuzz/; docs/reliability.md, "Fuzzing"). Configures and builds an
# instrumented build (clang-14, ASan + UBSan + libFuzzer's coverage) in build-fuzz/ the first time, then runs
# each target for SECONDS, one process at a time, and prints its executions and coverage.
#   Usage: scripts/fuzz.sh [TARGET|all|parsers|files] [SECONDS]   (default: all, 60)
#   Environment: LOCKSTEP_FUZZ_BUILD (build-fuzz), LOCKSTEP_FUZZ_JOBS (the build's -j, 2).
# Inputs it finds go to build-fuzz/corpus/TARGET (the checked-in seeds in fuzz/corpus/TARGET are read, never
# written); a crash, a sanitizer finding or a hang (10 s on one input) is written to
# build-fuzz/crashes/TARGET/ and named: fix it, then keep the input in fuzz/regressions/TARGET/, which the
# fuzz_replay_TARGET tests replay in every build. One line per target is appended to
# build-fuzz/fuzz-summary.txt. Exit status 1 when a target found something.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOCKSTEP_FUZZ_BUILD:-$root/build-fuzz}
which=${1:-all}
seconds=${2:-60}
parsers=(store env fit_config metrics_csv metrics_jsonl hparams_yaml heartbeat)
files=(safetensors checksum checkpoint idx cifar10 progress)

case $which in
  all) targets=("${parsers[@]}" "${files[@]}") ;;
  parsers) targets=("${parsers[@]}") ;;
  files) targets=("${files[@]}") ;;
  *)
    [[ " ${parsers[*]} ${files[*]} " == *" $which "* ]] ||
      { echo "fuzz.sh: no target '$which' (targets: ${parsers[*]} ${files[*]})" >&2; exit 2; }
    targets=("$which")
    ;;
esac
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive integer, got '$seconds'" >&2; exit 2; }
command -v clang++-14 >/dev/null || { echo "fuzz.sh: clang++-14 is missing (apt-get install clang-14)" >&2; exit 2; }

group_of() { [[ " ${parsers[*]} " == *" $1 "* ]] && echo parsers || echo files; }

flags="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" -DLOCKSTEP_FUZZ=ON -DLOCKSTEP_BUILD_TESTS=OFF \
    -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_TEST_FETCHCONTENT=OFF >/dev/null
fi
groups=()
for t in "${targets[@]}"; do groups+=("fuzz_$(group_of "$t")"); done
mapfile -t groups < <(printf '%s\n' "${groups[@]}" | sort -u)
cmake --build "$build" -j "${LOCKSTEP_FUZZ_JOBS:-2}" --target "${groups[@]}"

found=0
for t in "${targets[@]}"; do
  work="$build/corpus/$t" crashes="$build/crashes/$t"
  mkdir -p "$work" "$crashes"
  log="$build/fuzz-$t.log"
  echo "== fuzz.sh: $t for $seconds s (log: $log)"
  status=0
  # Suppressions as scripts/sanitize.sh: LibTorch is not instrumented.
  LOCKSTEP_FUZZ_TARGET=$t ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$root/scripts/sanitize/ubsan.supp \
    LSAN_OPTIONS=suppressions=$root/scripts/sanitize/lsan.supp \
    "$build/fuzz/fuzz_$(group_of "$t")" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 -close_fd_mask=1 -artifact_prefix="$crashes/" "$work" "$root/fuzz/corpus/$t" \
    >"$log" 2>&1 || status=$?
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  last=$(grep -E '#[0-9]+.*(cov|ft):' "$log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | awk '{print $2}')
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | awk '{print $2}')
  corpus=$(grep -o 'corp: [0-9]*' <<<"$last" | awk '{print $2}')
  finds=$(find "$crashes" -type f | wc -l)
  line="$(date -u +%F) $t seconds=$seconds execs=${execs:-?} cov=${cov:-?} ft=${ft:-?} corpus=${corpus:-?} findings=$finds status=$status"
  echo "$line" | tee -a "$build/fuzz-summary.txt"
  if [ "$status" -ne 0 ] || [ "$finds" -ne 0 ]; then
    found=1
    grep -E 'ERROR|SUMMARY|Test unit written|runtime error' "$log" | head -20 >&2 || true
  fi
done
exit $found
