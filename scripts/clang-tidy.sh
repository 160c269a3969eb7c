#!/bin/bash
# CI's clang-tidy step: scripts/clang-tidy.sh BUILD_DIR [FILE...]
# Runs clang-tidy 14 (Debian 12's; scripts/install-deps.sh installs it) with the repository's .clang-tidy
# on lockstep's sources, with the flags of BUILD_DIR's compile_commands.json; fails on any finding.
#
# Which files. clang-tidy parses a whole translation unit the way the compiler does, and a LibTorch one
# costs 40-65 s of CPU in clang-tidy alone (torch's headers, ~15000 declarations matched per check;
# measured on the 2-core development machine), so all 130-odd of them would take over an hour on CI's 2
# cores. CI's budget for this step is about 5-8 minutes, so by default it checks:
#   - every LibTorch-free source of src/ and apps/ (env, launch, log, comm's store and backend names, the
#     fit config, the CLI): ~75 files, a few seconds each;
#   - the LibTorch sources in kTorchFiles below, chosen for what a checker finds best there: the reducer
#     (autograd hooks, moves, buffers), the process group's wrapper, and the shm backend's collectives.
# Tests are not checked (GoogleTest's macros trip cert-err58-cpp on every TEST). Headers under include/
# are checked through the sources that include them (HeaderFilterRegex). Name files to check others:
#   scripts/clang-tidy.sh build src/train/checkpoint.cpp
# With the unity build (the default) CMake's database lists unity_N_cxx.cxx batches; the real sources and
# their flags come from scripts/source-compile-db.py.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: scripts/clang-tidy.sh BUILD_DIR [FILE...]}" && pwd)
shift
cd "$root"
kTorchFiles=(
  src/ddp/reducer.cpp
  src/comm/process_group.cpp
  src/comm/shm/process_group_shm.cpp
)

tool=""
for candidate in clang-tidy-14 clang-tidy; do
  if command -v "$candidate" >/dev/null && "$candidate" --version | grep -q "version 14\."; then
    tool=$candidate
    break
  fi
done
if [ -z "$tool" ]; then
  echo "clang-tidy: clang-tidy 14 not found (Debian: clang-tidy; scripts/install-deps.sh installs it)" >&2
  exit 1
fi
[ -f "$build/compile_commands.json" ] || {
  echo "clang-tidy: $build/compile_commands.json is missing (configure with CMake first)" >&2
  exit 1
}

db="$build/clang-tidy"
mkdir -p "$db"
python3 "$root/scripts/source-compile-db.py" "$build" "$db" >"$db/sources.txt"
if [ "$#" -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(awk -v root="$root/" '$1 == "plain" { sub(root, "", $2); print $2 }' "$db/sources.txt" |
    grep -E '^(src|apps)/')
  files+=("${kTorchFiles[@]}")
fi
for f in "${files[@]}"; do
  grep -qF " $root/$f" "$db/sources.txt" || {
    echo "clang-tidy: $f is not in $build's compile database (not built in this configuration?)" >&2
    exit 1
  }
done

echo "clang-tidy: ${#files[@]} files with $tool, $(nproc) at a time"
start=$(date +%s)
log="$db/findings.txt"
# --quiet drops the per-file summaries; "N warnings generated" (from headers outside the filter) is dropped
# here. xargs exits non-zero when any clang-tidy did (a finding: WarningsAsErrors is '*'; or a file that
# does not compile).
xargs_status=0
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 "$tool" -p "$db" --quiet >"$log.raw" 2>&1 || xargs_status=$?
grep -v '^[0-9]* warnings\? generated\.$' "$log.raw" >"$log" || true
status=0
if [ "$xargs_status" != 0 ] || grep -q 'error:\|warning:' "$log"; then
  cat "$log"
  status=1
fi
echo "clang-tidy: $(grep -c 'error:' "$log" || true) findings in ${#files[@]} files, $(($(date +%s) - start)) s"
exit "$status"
