#!/bin/bash
# check-skips.sh BUILD_DIR: after `ctest --test-dir BUILD_DIR`, lists every skip of that run with its reason
# and fails unless each is allowed by tests/allowed-skips.txt (cases no CI machine can meet: a GPU).
# Every skip in lockstep's tests prints a line "lockstep-skip: <case>: <reason>" (GoogleTest binaries through
# tests/support/gtest_main.cpp, the e2e scripts themselves) and exits 77, ctest's SKIP_RETURN_CODE; ctest's
# log (Testing/Temporary/LastTest.log) keeps each test's output under its name.
set -euo pipefail
build=${1:?usage: check-skips.sh BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
log="$build/Testing/Temporary/LastTest.log"
[ -f "$log" ] || { echo "check-skips: $log not found (run ctest --test-dir $build first)" >&2; exit 2; }

# "<ctest name>\t<case>: <reason>" for every skip line, in the order of the log.
skips=$(awk '
  /^[0-9]+\/[0-9]+ Test: / { test = $3 }
  /^lockstep-skip: / { sub(/^lockstep-skip: /, ""); print test "\t" $0 }
' "$log")
if [ -z "$skips" ]; then
  echo "check-skips: no test skipped in $build"
  exit 0
fi
allowed=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/tests/allowed-skips.txt")
bad=0
echo "check-skips: skipped in $build:"
while IFS=$'\t' read -r test what; do
  case_name=${what%%: *}
  if printf '%s\n' "$allowed" | awk -v t="$test" -v c="$case_name" '$1 == t && $2 == c { found = 1 } END { exit !found }'; then
    echo "  allowed   $test  $what"
  else
    echo "  NOT ALLOWED  $test  $what"
    bad=1
  fi
done <<<"$skips"
if [ "$bad" -ne 0 ]; then
  echo "check-skips: a test skipped whose prerequisite CI has or scripts/install-deps.sh installs; fix the" \
    "machine or the test (tests/allowed-skips.txt lists the only skips CI accepts)" >&2
  exit 1
fi
