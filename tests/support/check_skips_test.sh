#!/bin/bash
# check_skips_test.sh SKIP_DEMO SOURCE_DIR: the skip machinery itself.
# 1. lockstep's gtest main: a binary with a skipped test exits 77 (ctest's SKIP_RETURN_CODE) and prints
#    "lockstep-skip: Suite.Name: reason"; the same binary with the skip filtered out exits 0.
# 2. scripts/check-skips.sh over a ctest log: passes with no skip and with an allowed one, fails (naming the
#    test) on any other.
set -u
demo=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_skips_test: $*" >&2; exit 1; }

"$demo" >"$work/out" 2>&1
status=$?
[ "$status" -eq 77 ] || { cat "$work/out"; fail "a binary with a skipped test exited $status, expected 77"; }
grep -qx "lockstep-skip: SkipDemo.Skips: the demo's reason" "$work/out" || { cat "$work/out"; fail "no skip line"; }
"$demo" --gtest_filter=-SkipDemo.Skips >"$work/out" 2>&1 || { cat "$work/out"; fail "without the skip it did not pass"; }
grep -q "lockstep-skip" "$work/out" && fail "a skip line without a skip"

# A ctest log as ctest writes it: one block per test, its output inside.
log_with() {
  mkdir -p "$work/build/Testing/Temporary"
  {
    printf '1/2 Testing: test_comm\n1/2 Test: test_comm\nOutput:\n%s\n<end of output>\nTest Passed.\n' "$1"
    printf '2/2 Testing: e2e_x\n2/2 Test: e2e_x\nOutput:\n%s\n<end of output>\nTest Passed.\n' "$2"
  } >"$work/build/Testing/Temporary/LastTest.log"
}
log_with "[  PASSED  ] 3 tests." "ok"
"$src/scripts/check-skips.sh" "$work/build" >"$work/out" 2>&1 || { cat "$work/out"; fail "no skip, yet check-skips failed"; }
log_with "lockstep-skip: Backends.NcclWithoutAGpuSaysWhatToUse: this machine has a GPU" "ok"
"$src/scripts/check-skips.sh" "$work/build" >"$work/out" 2>&1 || { cat "$work/out"; fail "an allowed skip failed"; }
grep -q "allowed   test_comm  Backends.NcclWithoutAGpuSaysWhatToUse" "$work/out" || { cat "$work/out"; fail "the allowed skip is not listed"; }
log_with "[  PASSED  ] 3 tests." "lockstep-skip: slurm_e2e[ddp]: slurmd is not installed"
if "$src/scripts/check-skips.sh" "$work/build" >"$work/out" 2>&1; then
  cat "$work/out"
  fail "a skip that CI could have met passed check-skips"
fi
grep -q "NOT ALLOWED  e2e_x  slurm_e2e\[ddp\]: slurmd is not installed" "$work/out" || { cat "$work/out"; fail "the refused skip is not named"; }
echo "ok: gtest main exits 77 naming the skip; check-skips allows only tests/allowed-skips.txt"
