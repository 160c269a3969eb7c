#!/bin/bash
# Builds lockstep's unit suites with a sanitizer and runs each binary; any finding (or failed test) fails.
# LibTorch is not instrumented: scripts/sanitize/*.supp silence only its (and gloo's, OpenMP's) internals.
# See docs/reliability.md, "Sanitizers".
#   Usage: scripts/sanitize.sh address|undefined|thread [BUILD_DIR]   (default BUILD_DIR: build-SANITIZER)
#   address = ASan + UBSan (what CI runs). Environment: LOCKSTEP_SANITIZE_JOBS, the build's -j (2);
#   LOCKSTEP_SANITIZE_TIMEOUT, seconds per binary (900).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
supp=$root/scripts/sanitize

# The unit suites whose code runs on several threads: ranks as threads over every backend and the store
# (test_comm, test_tcp_store), the loader's workers (test_data), DDP's hooks (test_ddp), ZeRO/FSDP
# (test_shard); and the torch-free parsers (test_env, test_log) and hashes (test_job_secret), which cost
# seconds to build.
targets=(test_comm test_tcp_store test_job_secret test_data test_ddp test_shard test_env test_log)

die() {
  echo "sanitize.sh: $*" >&2
  exit 2
}

# The compiler flags of one sanitizer; UBSan stops at its first finding (-fno-sanitize-recover).
sanitizer_flags() {
  case $1 in
    address) echo "-fsanitize=address,undefined -fno-sanitize-recover=undefined" ;;
    undefined) echo "-fsanitize=undefined -fno-sanitize-recover=undefined" ;;
    thread) echo "-fsanitize=thread" ;;
    *) return 1 ;;
  esac
}

configure() {
  local build=$1 flags="$2 -fno-omit-frame-pointer"
  # -O1 -g1: sanitizer builds' usual optimisation, line tables for the stacks; half the compile of -O2 -g.
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
    -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_TEST_FETCHCONTENT=OFF >/dev/null
}

# The runtime options of each sanitizer: stop at the first finding, with a stack, through the suppressions.
export_options() {
  local common="halt_on_error=1:print_stacktrace=1:exitcode=86"
  export UBSAN_OPTIONS="$common:suppressions=$supp/ubsan.supp"
  export ASAN_OPTIONS="$common:detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export TSAN_OPTIONS="$common:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
  # LibTorch's OpenMP (libgomp) threads synchronise in code TSan cannot see: one intra-op thread.
  export OMP_NUM_THREADS=1
}

# What ctest gives each test (LOCKSTEP_SOURCE_DIR, LOCKSTEP_PYTHON, ...: lockstep_test_env.cmake), exported.
export_test_env() {
  local file=$1/lockstep_test_env.cmake line
  [ -f "$file" ] || die "$file missing: was $1 configured by this script?"
  while IFS= read -r line; do
    # Its other lines are for ctest (the check of LOCKSTEP_PYTHON's torch).
    [[ $line =~ ^set\(ENV\{([A-Z_]+)\}\ \[==\[(.*)\]==\]\)$ ]] || continue
    export "${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"
  done <"$file"
}

# Runs one binary, its output in LOG; prints the whole log when it fails.
run_one() {
  local build=$1 name=$2 log=$3 status=0 start=$SECONDS
  (cd "$build" && timeout "${LOCKSTEP_SANITIZE_TIMEOUT:-900}" "./tests/$(test_dir "$name")/$name") >"$log" 2>&1 ||
    status=$?
  if [ "$status" -eq 0 ] || [ "$status" -eq 77 ]; then
    echo "sanitize.sh: $name passed in $((SECONDS - start)) s$([ "$status" -eq 77 ] && echo ', with skips (see log)')"
    return 0
  fi
  cat "$log"
  echo "sanitize.sh: $name FAILED (exit $status) under $sanitizer: see $log" >&2
  return 1
}

test_dir() {
  case $1 in
    test_comm | test_tcp_store | test_job_secret) echo comm ;;
    test_data) echo data ;;
    test_ddp) echo ddp ;;
    test_shard) echo shard ;;
    test_env) echo env ;;
    test_log) echo log ;;
    *) die "no test folder known for $1" ;;
  esac
}

main() {
  if [ $# -lt 1 ] || [ $# -gt 2 ]; then die "usage: scripts/sanitize.sh address|undefined|thread [BUILD_DIR]"; fi
  sanitizer=$1
  local flags build failed=()
  flags=$(sanitizer_flags "$sanitizer") || die "unknown sanitizer '$sanitizer': use address, undefined or thread"
  build=$(mkdir -p "${2:-$root/build-$1}" && cd "${2:-$root/build-$1}" && pwd)
  configure "$build" "$flags" || die "configuring $build failed"
  cmake --build "$build" -j "${LOCKSTEP_SANITIZE_JOBS:-2}" --target "${targets[@]}" ||
    die "building ${targets[*]} in $build failed"
  export_options
  export_test_env "$build"
  mkdir -p "$build/sanitize-logs"
  for name in "${targets[@]}"; do
    run_one "$build" "$name" "$build/sanitize-logs/$name.log" || failed+=("$name")
  done
  [ ${#failed[@]} -eq 0 ] || die "$sanitizer: failed: ${failed[*]}"
  echo "sanitize.sh: $sanitizer: all ${#targets[@]} binaries clean"
}

main "$@"
