#!/usr/bin/env bash
# The tensor-parallel GPT with real processes (tests/models/tp_gpt_worker.cpp): 2 data x 2 tensor parallel
# ranks over shm subgroups, and 2 data-parallel ranks without tensor parallelism on the same batches, must
# give the same losses step by step (float64; the ranks' partial sums are added in other orders only).
#
#   tp_gpt_mesh.sh LOCKSTEP TP_GPT_WORKER
set -uo pipefail
lockstep=$1 worker=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

run() {  # NAME RANKS T
  "$lockstep" run --nproc-per-node "$2" --standalone -- "$worker" --out "$work/$1" --steps 5 --tensor-parallel "$3" \
    >"$work/$1.out" 2>&1
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
echo "tp_gpt_mesh: ok, 5 steps"
