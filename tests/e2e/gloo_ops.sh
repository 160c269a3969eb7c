#!/usr/bin/env bash
# Gloo on this LibTorch with real processes (tests/comm/gloo_ops_worker.cpp).
#
#   gloo_ops.sh N LOCKSTEP WORKER [REF_LOCKSTEP REF_WORKER]
#
# Runs WORKER with N ranks under LOCKSTEP's `lockstep run`: every rank checks every collective lockstep sends
# over Gloo, in every dtype, against its own expectation, and dumps the results. With a reference build (its
# lockstep and gloo_ops_worker: another LibTorch, e.g. Debian's 1.13 next to PyPI's 2.x), runs that one the
# same way, then requires every result both produced to have the same bytes, rank by rank.
set -uo pipefail
n=$1 lockstep=$2 worker=$3 ref_lockstep=${4:-} ref_worker=${5:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# run_build NAME LOCKSTEP WORKER: the job, then every rank's ok line.
run_build() {
  mkdir -p "$work/$1"
  "$2" run --nproc-per-node "$n" --standalone -- "$3" --dump "$work/$1" >"$work/$1.out" 2>&1
  local status=$?
  cat "$work/$1.out"
  [ "$status" -eq 0 ] || fail "$1: the job exited with $status"
  for r in $(seq 0 $((n - 1))); do
    grep -Eq "^\[rank $r\] rank $r/$n gloo_ops ok \(torch " "$work/$1.out" || fail "$1: rank $r printed no ok line"
    [ -s "$work/$1/rank$r.bin" ] || fail "$1: rank $r wrote no dump"
  done
}

run_build this "$lockstep" "$worker"
if [ -n "$ref_lockstep" ]; then
  run_build reference "$ref_lockstep" "$ref_worker"
  for r in $(seq 0 $((n - 1))); do
    echo "rank $r: A = reference build, B = this build"
    "$worker" --compare "$work/reference/rank$r.bin" "$work/this/rank$r.bin" || fail "rank $r: the builds' results differ"
  done
fi
echo "gloo_ops: ok"
