#!/usr/bin/env bash
# In-place recovery end to end: `lockstep run --recovery in-place` of a user's own DDP loop
# (tests/ddp/elastic_ddp_worker.cpp) that loses ranks while it trains. The job must exit 0 and end on the
# parameters (float64, to 1e-9) of one process that trained the same global batches as an undisturbed run
# whose world changed at the same steps: nothing trained twice, nothing skipped, no step applied by some
# ranks only.
#
#   elastic_inplace_e2e.sh CASE LOCKSTEP WORKER
#   CASE: kill_<seed>     kill -9 of one of 3 ranks at a step the seed picks
#         sigstop         SIGSTOP of one of 3 ranks: the launcher finds it silent and kills it
#         two_in_a_row    4 ranks, kill -9 of one, then of another once the first change is done
#         during_reform   4 ranks, kill -9 of one; a second dies as the others re-form
set -u
case_name=$1 lockstep=$2 worker=$3
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL ($case_name): $*"
  echo "--- the run's output (steps left out):"
  grep -v '\] step ' "$work/log" 2>/dev/null | tail -40
  exit 1
}

# wait_step RANK STEP: until rank RANK reports committed step STEP (at most 60 s).
wait_step() {
  for _ in $(seq 1 1200); do
    grep -q "^\[rank $1\] step $2 " "$work/log" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "rank $1 never reached step $2"
}
pid_of() { grep "^\[rank $1\] pid " "$work/log" | awk '{print $4}'; }
wait_change() {  # wait_change N: until rank 0 has reported N membership changes
  for _ in $(seq 1 1200); do
    [ "$(grep -c '^\[rank 0\] membership change' "$work/log" 2>/dev/null)" -ge "$1" ] && return 0
    sleep 0.05
  done
  fail "rank 0 never reported membership change $1"
}

ranks=3 extra=() heartbeat=5
case "$case_name" in
  kill_*) seed=${case_name#kill_} ;;
  sigstop) heartbeat=3 ;;
  two_in_a_row) ranks=4 ;;
  during_reform) ranks=4 extra=(--die-in-reform 3) ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac

"$lockstep" run --nproc-per-node "$ranks" --standalone --recovery in-place --heartbeat-timeout "$heartbeat" -- \
  "$worker" --out "$work/final.pt" --step-ms 20 "${extra[@]}" >"$work/log" 2>&1 &
launcher=$!

case "$case_name" in
  kill_*)
    victim=$((1 + seed % 2)) step=$((4 + (seed * 17) % 40))
    wait_step "$victim" "$step"
    kill -9 "$(pid_of "$victim")"
    echo "killed rank $victim after its step $step"
    ;;
  sigstop)
    wait_step 2 12
    kill -STOP "$(pid_of 2)"
    echo "stopped rank 2 after its step 12"
    ;;
  two_in_a_row)
    wait_step 3 6
    kill -9 "$(pid_of 3)"
    wait_change 1
    wait_step 1 20
    kill -9 "$(pid_of 1)"
    echo "killed rank 3 after its step 6, then rank 1 after its step 20"
    ;;
  during_reform)
    wait_step 1 9
    kill -9 "$(pid_of 1)"
    echo "killed rank 1 after its step 9 (rank 3 dies as the others re-form)"
    ;;
esac

wait "$launcher"
status=$?
[ "$status" -eq 0 ] || fail "lockstep run exited $status"
grep -q '^lockstep run: in place: lost rank(s) ' "$work/log" || fail "no summary of the lost ranks"
[ -s "$work/final.pt" ] || fail "no parameters were saved"

# The worlds rank 0 went through: "3@0,2@17,...".
worlds="$ranks@0"
while read -r step size; do
  worlds="$worlds,$size@$step"
done < <(sed -n 's/^\[rank 0\] membership change at step \([0-9]*\): .* -> \([0-9]*\) (generation.*/\1 \2/p' "$work/log")
[ "$worlds" != "$ranks@0" ] || fail "rank 0 reported no membership change"
grep '^\[rank 0\] membership change' "$work/log"
"$worker" --reference "$worlds" --out "$work/reference.pt" || fail "the reference did not run"
"$worker" --compare "$work/final.pt" "$work/reference.pt" || fail "the parameters differ from the reference ($worlds)"
echo "PASS ($case_name): worlds $worlds"
