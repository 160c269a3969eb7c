#!/usr/bin/env bash
# The tensor-parallel GPT with real processes (tests/models/tp_gpt_worker.cpp): 2 data x 2 tensor parallel
# ranks over shm subgroups, and 2 data-parallel ranks without tensor parallelism on the same batches, must
# give the same losses step by step (float64; the ranks' partial sums are added in other orders only).
# Then the same in float32 (what training runs in), against a tolerance taken from float32 itself: the
# mesh's losses must be as close to the float64 run's as the 2 plain ranks' float32 losses are, give or
# take a few float32 roundings of a loss (2 ulp of 5.5 is 1e-6): |mesh32 - flat64| <= 2 |flat32 - flat64|
# + 2e-6 at every step.
#
#   tp_gpt_mesh.sh LOCKSTEP TP_GPT_WORKER
set -uo pipefail
lockstep=$1 worker=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

run() {  # NAME RANKS T [DTYPE]
  "$lockstep" run --nproc-per-node "$2" --standalone -- "$worker" --out "$work/$1" --steps 5 --tensor-parallel "$3" \
    --dtype "${4:-float64}" >"$work/$1.out" 2>&1
  local status=$?
  cat "$work/$1.out"
  [ "$status" -eq 0 ] || fail "$1: the job exited with $status"
  grep -q "tp_gpt_worker ok (tp $3, dp 2, 5 steps)" "$work/$1.out" || fail "$1: no ok line"
}
run mesh 4 2
run flat 2 1
paste "$work/mesh/cpp_losses.txt" "$work/flat/cpp_losses.txt" |
  awk '{ d = $1 - $2; if (d < 0) d = -d; print "step " NR - 1 ": 2 x 2 " $1 "  2 x 1 " $2 "  difference " d;
         if (d > 1e-12) bad = 1; n++ } END { exit bad || n != 5 }' ||
  fail "the 2 x 2 mesh's losses differ from the 2 data-parallel ranks' (above)"
run mesh32 4 2 float32
run flat32 2 1 float32
paste "$work/mesh32/cpp_losses.txt" "$work/flat32/cpp_losses.txt" "$work/flat/cpp_losses.txt" |
  awk '{ m = $1 - $3; if (m < 0) m = -m; f = $2 - $3; if (f < 0) f = -f;
         print "step " NR - 1 ": float32 2 x 2 " $1 "  2 x 1 " $2 "  float64 " $3 "  |mesh - float64| " m "  |flat - float64| " f;
         if (m > 2 * f + 2e-6) bad = 1; n++ } END { exit bad || n != 5 }' ||
  fail "in float32 the 2 x 2 mesh's losses are further from float64's than float32 rounding explains (above)"
echo "tp_gpt_mesh: ok, 5 steps in float64 and float32"
