#!/usr/bin/env bash
# In-place recovery end to end: `lockstep run --recovery in-place` of a loop that loses ranks while it
# trains: a user's own DDP loop (tests/ddp/elastic_ddp_worker.cpp) or the Accelerator's
# (tests/train/elastic_accelerator_worker.cpp, which trains the same job). The job must exit 0 and end on the
# parameters (float64, to 1e-9) of one process that trained the same global batches as an undisturbed run
# whose world changed at the same steps: nothing trained twice, nothing skipped, no step applied by some
# ranks only.
#
#   elastic_inplace_e2e.sh CASE LOCKSTEP WORKER [REFERENCE]
#   REFERENCE: what runs --reference and --compare (elastic_ddp_worker; default: WORKER)
#   CASE: kill_<seed>     kill -9 of one of 3 ranks at a step the seed picks
#         sigstop         SIGSTOP of one of 3 ranks: the launcher finds it silent and kills it
#         two_in_a_row    4 ranks, kill -9 of one, then of another once the first change is done
#         kill_rank0      kill -9 of rank 0 of 3 (the survivors' new rank 0 saves the parameters)
#         two_in_one_pass 4 ranks, kill -9 of one at step 4, of another at step 8: both in epoch 0, so the
#                         epoch's rest is re-sharded a second time (three parts)
#         during_reform   4 ranks, kill -9 of one; a second dies as the others re-form
#         accumulate      3 ranks accumulating 2 micro-batches per step (the Accelerator's worker only),
#                         kill -9 of one at a step's first micro-batch; the reference's batch is 10
#         join            2 ranks; a second `lockstep run` on the same endpoint starts 2 more, which join
#         join_then_kill  as join, then kill -9 of a joined rank (its launcher announces it)
#         join_then_stop  as join, then SIGTERM to the joining launcher: it stops its workers and announces
#                         both before it exits
#         join_then_serving_lost  as join, then kill -9 of both of the serving launcher's ranks: the joined
#                         ranks go on alone, and it serves the store until they finish
#         join_then_serving_term  as join_then_serving_lost, then SIGTERM to the serving launcher while the
#                         joined ranks train: it stops serving at once and says so (exit 143)
set -u
export LOCKSTEP_JOB_SECRET=e2e-secret-of-the-emulated-nodes-0123  # a job that spans nodes needs one (issue 42)
case_name=$1 lockstep=$2 worker=$3 reference=${4:-$3}
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL ($case_name): $*"
  echo "--- the run's output (steps left out):"
  grep -v '\] step ' "$work/log" 2>/dev/null | tail -40
  exit 1
}
. "$(dirname "$0")/e2e_lib.sh"  # wait_for

# wait_hold FILE: until a held rank has written its pid to FILE (at most 60 s); prints the pid.
wait_hold() {
  for _ in $(seq 1 1200); do
    [ -s "$1" ] && { cat "$1"; return 0; }
    sleep 0.05
  done
  fail "no rank reached its hold ($1)"
}

# Each fault lands where the worker holds (--hold ID:STEP:WHERE:FILE): a rank stops at a given step and
# waits to be killed or stopped, so no clock decides where. WHERE: start (the others wait for it in the
# step's all-reduce) or vote (its gradients reduced, the others wait for its vote).
ranks=3 args=() heartbeat=5 reference_args=()
reporter=0 report_log=$work/log  # the rank whose lines tell the worlds (one that survives), and where
case "$case_name" in
  kill_rank0) args=(--hold "0:27:vote:$work/hold1") reporter=1 ;;
  kill_*)
    seed=${case_name#kill_}
    victim=$((1 + seed % 2)) step=$((4 + (seed * 17) % 40)) where=start
    ((seed % 2 == 0)) && where=vote
    args=(--hold "$victim:$step:$where:$work/hold1")
    ;;
  sigstop) args=(--hold "2:12:start:$work/hold1") ;;
  two_in_a_row) ranks=4 args=(--hold "3:6:start:$work/hold1" --hold "1:20:vote:$work/hold2") ;;
  two_in_one_pass) ranks=4 args=(--hold "3:4:start:$work/hold1" --hold "1:8:vote:$work/hold2") ;;
  during_reform) ranks=4 args=(--hold "1:9:start:$work/hold1" --die-in-reform 3) ;;
  accumulate) args=(--accumulate 2 --hold "2:13:start:$work/hold1") reference_args=(--batch 10) ;;
  join) ranks=2 args=(--wait-for-join 15:2) ;;
  join_then_kill | join_then_stop) ranks=2 args=(--wait-for-join 15:2 --hold "3:40:start:$work/hold1") ;;
  join_then_serving_lost)  # the joined rank id 2 reports (in the joining launcher's output)
    ranks=2 reporter=2 report_log=$work/log2
    args=(--wait-for-join 15:2 --hold "0:40:start:$work/hold1" --hold "1:40:start:$work/hold2") ;;
  join_then_serving_term)  # rank id 3 holds at step 60: the joined ranks are still training at the signal
    ranks=2
    args=(--wait-for-join 15:2 --hold "0:40:start:$work/hold1" --hold "1:40:start:$work/hold2"
      --hold "3:60:start:$work/hold3") ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac

# The join cases name the endpoint (the first launcher serves the store there; the second finds it served
# and joins) and start the second launcher, with the same command line, once the job trains.
if [[ $case_name == join* ]]; then
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  run=("$lockstep" run --nproc-per-node "$ranks" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "join$port" \
    --recovery in-place --heartbeat-timeout "$heartbeat" -- "$worker" --out "$work/final.pt" "${args[@]}")
  "${run[@]}" >"$work/log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 1200); do
    grep -q '^\[rank 0\] step 1 ' "$work/log" 2>/dev/null && break
    sleep 0.05
  done
  "${run[@]}" >"$work/log2" 2>&1 &
  joining=$!
  if [ "$case_name" = join_then_kill ]; then
    kill -9 "$(wait_hold "$work/hold1")" && echo "killed joined rank id 3 held at step 40"
  elif [ "$case_name" = join_then_stop ]; then
    wait_hold "$work/hold1" >/dev/null && kill -TERM "$joining" && echo "stopped the joining launcher at step 40"
  elif [[ $case_name == join_then_serving_* ]]; then
    kill -9 "$(wait_hold "$work/hold1")" "$(wait_hold "$work/hold2")" && echo "killed rank ids 0 and 1 at step 40"
  fi
  if [ "$case_name" = join_then_serving_term ]; then
    wait_hold "$work/hold3" >/dev/null
    WAIT_FOR_S=60 wait_for "$work/log" 'serving the store until the 2 joined rank(s) finish'  # once it reaped both
    kill -TERM "$launcher"
    wait "$launcher"
    status=$?
    kill -TERM "$joining"  # its held rank and the other stop with it
    wait "$joining"
    [ "$status" -eq 143 ] || fail "the serving launcher exited $status after SIGTERM, not 143"
    grep -q 'received SIGTERM; closing the store under the 2 joined rank(s) still training' "$work/log" ||
      fail "the serving launcher did not say why it closed the store"
    echo "PASS ($case_name): SIGTERM ended the serving of the joined ranks"
    exit 0
  fi
  wait "$joining"
  status=$?
  cat "$work/log2"
  grep -q 'serves a running job: its 2 worker(s) join it as rank id(s) 2..3' "$work/log2" ||
    fail "the second launcher did not join"
  [ "$case_name" = join ] || [ "$case_name" = join_then_serving_lost ] &&
    [ "$status" -ne 0 ] && fail "the joining launcher exited $status"
  grep -q 'joined at step' "$work/log2" || fail "no joined rank reported its admission"
fi

if [[ $case_name != join* ]]; then
  "$lockstep" run --nproc-per-node "$ranks" --standalone --recovery in-place --heartbeat-timeout "$heartbeat" \
    -- "$worker" --out "$work/final.pt" "${args[@]}" >"$work/log" 2>&1 &
  launcher=$!
fi

case "$case_name" in
  kill_rank0) kill -9 "$(wait_hold "$work/hold1")" && echo "killed rank 0 held at step 27 (vote)" ;;
  kill_*) kill -9 "$(wait_hold "$work/hold1")" && echo "killed rank $victim held at step $step ($where)" ;;
  sigstop) kill -STOP "$(wait_hold "$work/hold1")" && echo "stopped rank 2 held at step 12" ;;
  two_in_a_row)
    kill -9 "$(wait_hold "$work/hold1")"
    kill -9 "$(wait_hold "$work/hold2")"
    echo "killed rank 3 held at step 6, then rank 1 held at step 20 (vote)"
    ;;
  two_in_one_pass)
    kill -9 "$(wait_hold "$work/hold1")"
    kill -9 "$(wait_hold "$work/hold2")"
    echo "killed rank 3 held at step 4, then rank 1 held at step 8 (vote), both in epoch 0"
    ;;
  during_reform) kill -9 "$(wait_hold "$work/hold1")" && echo "killed rank 1 held at step 9 (rank 3 dies as the others re-form)" ;;
  accumulate) kill -9 "$(wait_hold "$work/hold1")" && echo "killed rank 2 held at step 13's first micro-batch" ;;
esac

wait "$launcher"
status=$?
if [ "$case_name" = join_then_serving_lost ]; then  # its own workers failed; the job went on without them
  [ "$status" -ne 0 ] || fail "the serving launcher exited 0 though all its workers were lost"
  grep -q 'in place: this launcher.s workers are all lost; serving the store until the 2 joined rank(s) finish' \
    "$work/log" || fail "the serving launcher did not say it serves the joined ranks"
  [ -s "$work/final.pt" ] || fail "the joined ranks saved no parameters (they did not finish)"
elif [ "$status" -ne 0 ]; then
  fail "lockstep run exited $status"
fi
# (A launcher stopped by a signal, or one whose workers were all lost, says so instead.)
[ "$case_name" = join ] || [ "$case_name" = join_then_stop ] || [ "$case_name" = join_then_serving_lost ] ||
  grep -q 'in place: lost rank(s) ' "$work/log" "$work/log2" 2>/dev/null || fail "no summary of the lost ranks"
[ -s "$work/final.pt" ] || fail "no parameters were saved"
if [ "$case_name" = join_then_stop ]; then
  grep -q 'rank(s) 2, 3 left (its launcher stopped before it finished)' "$work/log" ||
    fail "the stopped launcher's ranks were not announced as one change"
fi

# The worlds the reporting rank went through: "3@0,2@17,..." (a joined reporter's starts where it joined).
worlds="$ranks@0"
while read -r step size; do
  worlds="$worlds,$size@$step"
done < <(sed -n -e 's/^\[rank '"$reporter"'\] membership change at step \([0-9]*\): .* -> \([0-9]*\) (generation.*/\1 \2/p' \
  -e 's/^\[rank '"$reporter"'\] joined at step \([0-9]*\) as rank [0-9]* of \([0-9]*\)$/\1 \2/p' "$report_log")
[ "$worlds" != "$ranks@0" ] || fail "rank $reporter reported no membership change"
grep "^\[rank $reporter\] membership change" "$report_log"
"$reference" --reference "$worlds" --out "$work/reference.pt" "${reference_args[@]}" || fail "the reference did not run"
"$reference" --compare "$work/final.pt" "$work/reference.pt" || fail "the parameters differ from the reference ($worlds)"
echo "PASS ($case_name): worlds $worlds"
