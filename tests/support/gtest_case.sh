#!/bin/sh
# gtest_case.sh LOG CASE BINARY: one GoogleTest case's ctest entry. Its binary ran once, as ctest entry BINARY
# (the fixture this entry requires), and wrote LOG (tests/support/gtest_main.cpp says its lines); this prints
# the case's verdict and exits as ctest reads it: 0 passed, 1 failed or never ended, 77 skipped (with the
# line "lockstep-skip: CASE: reason" that scripts/check-skips.py reads).
log=$1
case=$2
binary=$3
if [ ! -f "$log" ]; then
  echo "$case: $binary wrote no case log ($log): it did not start, or was not run (see ctest $binary)" >&2
  exit 1
fi
awk -F '\t' -v c="$case" -v b="$binary" '
  $2 == c && $1 == "note" { notes = notes "  " $3 "\n"; next }
  $2 == c { state = $1; reason = $3 }
  END {
    if (state == "pass") { print c ": passed in " b "'"'"'s run"; exit 0 }
    if (state == "skip") { print "lockstep-skip: " c ": " reason; exit 77 }
    if (state == "fail") { printf "%s: FAILED in %s'"'"'s run (ctest %s has its whole output):\n%s", c, b, b, notes; exit 1 }
    if (state == "start") {
      print c ": was running when " b " ended: it crashed, or hung until its ctest TIMEOUT (see ctest " b ")"
      exit 1
    }
    print c ": did not run: " b " ended before it (see ctest " b "), or no longer has it (rebuild)"
    exit 1
  }' "$log"
