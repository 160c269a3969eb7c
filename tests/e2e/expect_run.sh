#!/bin/sh
# Usage: expect_run.sh PATTERN... -- COMMAND [ARGS...]
# Runs COMMAND (bounded by ctest's TIMEOUT), prints its output, and passes only when it exits 0 and
# its combined output contains every PATTERN (grep -E, one line each).
set -u
patterns_file=$(mktemp)
out=$(mktemp)
trap 'rm -f "$patterns_file" "$out"' EXIT
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  printf '%s\n' "$1" >>"$patterns_file"
  shift
done
[ $# -gt 0 ] && shift
"$@" >"$out" 2>&1
status=$?
cat "$out"
if [ "$status" -ne 0 ]; then
  echo "expect_run: command exited with status $status: $*" >&2
  exit 1
fi
while IFS= read -r pattern; do
  if ! grep -Eq -- "$pattern" "$out"; then
    echo "expect_run: output lacks /$pattern/" >&2
    exit 1
  fi
done <"$patterns_file"
echo "expect_run: ok"
