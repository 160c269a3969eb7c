#!/usr/bin/env bash
# The pipeline-parallel GPT with real processes (tests/pipeline/pp_gpt_worker.cpp): 2 stages with 1F1B and
# with GPipe (4 micro-batches), and 4 stages with 1F1B (8 micro-batches), must give one process's losses
# step by step (float64: the tied embedding's two gradients are added in another order, nothing more).
#
#   pp_gpt_e2e.sh LOCKSTEP PP_GPT_WORKER
set -uo pipefail
lockstep=$1 worker=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

run() {  # NAME RANKS SCHEDULE M
  "$lockstep" run --nproc-per-node "$2" --standalone -- "$worker" --out "$work/$1" --steps 8 --schedule "$3" \
    --micro-batches "$4" >"$work/$1.out" 2>&1
  local status=$?
  cat "$work/$1.out"
  [ "$status" -eq 0 ] || fail "$1: the job exited with $status"
  grep -q "pp_gpt_worker ok (stage 0 .*$3, M $4, 8 steps" "$work/$1.out" || fail "$1: no ok line of stage 0"
}
compare() {  # NAME
  paste "$work/$1/cpp_losses.txt" "$work/one/cpp_losses.txt" |
    awk -v name="$1" '{ d = $1 - $2; if (d < 0) d = -d; print name " step " NR - 1 ": " $1 "  one process " $2 "  difference " d;
           if (d > 1e-12) bad = 1; n++ } END { exit bad || n != 8 }' ||
    fail "$1's losses differ from one process's (above)"
}
run one 1 gpipe 1
run p2_1f1b 2 1f1b 4
compare p2_1f1b
run p2_gpipe 2 gpipe 4
compare p2_gpipe
run p4_1f1b 4 1f1b 8
compare p4_1f1b
awk 'NR == 1 { first = $1 } END { if (!($1 < first)) { print "the loss did not fall: " first " -> " $1; exit 1 } }' \
  "$work/one/cpp_losses.txt" || fail "no training to compare"
echo "pp_gpt_e2e: ok, 8 steps of P 2 (1f1b, gpipe) and P 4 (1f1b) equal one process's"
