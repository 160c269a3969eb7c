#!/bin/bash
# Hangs become errors (issue 7), with real ranks of `lockstep fit`.
# Usage: hang_e2e.sh CASE LOCKSTEP PYTHON3
# No case compares a time: each job runs under `timeout 100` (the hang bound, beneath ctest's 120 s), and
# what ended it is read from its messages, an order of events.
#   stop:  rank 1 SIGSTOPs itself after step 3 (shm backend): the job ends non-zero, naming rank 1 as
#          stalled, and no worker is left behind.
#   hang:  rank 1 blocks forever outside collectives after step 3 (a data loader that never returns; gloo):
#          the same, and the error says rank 1 is alive but busy outside collectives.
#   extra: rank 1 issues one all-reduce the others do not (a branch taken on one rank; gloo): the error
#          names both ranks' collectives, with a collective timeout of an hour: nothing but the mismatch
#          check can end that job within the hang bound.
#   named: the same hang, but the ranks' own collective timeout (3 s) ends it, not the launcher's (an hour):
#          rank 0's error names the collective, its number, DDP's bucket, and rank 1 as not arrived, and
#          the launcher killed nobody.
#   flags: --collective-timeout is checked (lockstep run and lockstep fit).
set -u
case_name=$1 lockstep=$2 python=$3
work=$(mktemp -d)
trap 'pkill -KILL -f -- "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "hang_e2e[$case_name]: $*" >&2; exit 1; }
source "$(dirname "$0")/e2e_lib.sh"

timeout_s=4
# 512 synthetic images, 2 ranks x 8 steps per epoch; the metrics path marks this job's processes.
common="--devices 2 --data synthetic --synthetic-size 512 --batch-size 32 --max-epochs 2 --progress off
        --metrics-file $work/metrics.jsonl"

# run_faulty FAULT EXTRA_FLAGS...: runs the job with the fault under the hang bound, records its status.
run_faulty() {
  local fault=$1
  shift
  LOCKSTEP_FAULT=$fault timeout 100 "$lockstep" fit $common "$@" >"$work/out" 2>"$work/err"
  status=$?
  cat "$work/out" "$work/err"
  echo "exit status $status"
  [ "$status" -ne 124 ] || fail "the job did not end within 100 s (the hang bound)"
  [ "$status" -ne 0 ] || fail "the job exited 0 despite the fault $fault"
  no_process_left
}

# Nothing of this job may survive it (the stopped rank included). A process that was sent SIGKILL may
# take a moment to go: polled, 30 s bounds a hang only.
no_process_left() {
  local i
  for ((i = 0; i < 300; i++)); do
    pgrep -f -- "$work" >/dev/null || return 0
    sleep 0.1
  done
  pgrep -af -- "$work"
  fail "processes of the job are still running"
}

case "$case_name" in
stop)
  run_faulty 1:3:stop --collective-timeout $timeout_s
  grep -Eq "rank 1 \(local rank 1, pid [0-9]+\) sent no heartbeat for [0-9.]+ s|waiting for rank\(s\) 1 \(alive" "$work/err" ||
    fail "no message names rank 1 as the stalled rank"
  ;;
hang)
  run_faulty 1:3:hang --collective-timeout $timeout_s --backend gloo
  grep -Eq "rank 1 \(local rank 1, pid [0-9]+\) reached no collective for [0-9.]+ s|Not at collective #[0-9]+: rank 1 \(last allreduce" "$work/err" ||
    fail "no message names rank 1 as stuck outside collectives"
  ;;
extra)
  # A collective timeout of an hour: only the mismatch check can end the job within the hang bound.
  run_faulty 1:3:extra --collective-timeout 3600 --backend gloo
  grep -Eq "the ranks called different collectives: rank [01] called allreduce #[0-9]+ \(Float\[[0-9]+\]\) .* but rank [01] called allreduce #[0-9]+ \(Float\[[0-9]+\]\)" "$work/err" ||
    fail "the error does not name both ranks' collectives"
  grep -q "Float\[3\]" "$work/err" || fail "the error does not show rank 1's extra all-reduce (Float[3])"
  ;;
named)
  # The launcher would step in only after an hour (LOCKSTEP_TIMEOUT), long past the hang bound.
  LOCKSTEP_TIMEOUT=3600 LOCKSTEP_FAULT=1:3:hang timeout 100 "$lockstep" run --nproc-per-node 2 -- "$lockstep" fit \
    --data synthetic --synthetic-size 512 --batch-size 32 --max-epochs 2 --progress off --backend gloo \
    --collective-timeout 3 --metrics-file "$work/metrics.jsonl" >"$work/out" 2>"$work/err"
  status=$?
  cat "$work/out" "$work/err"
  [ "$status" -ne 124 ] || fail "the job did not end within 100 s (the hang bound)"
  [ "$status" -ne 0 ] || fail "the job exited 0 despite the hang"
  ! grep -q "stalled and was killed" "$work/err" || fail "the launcher killed a rank: the ranks' own timeout did not end the job"
  no_process_left
  grep -Eq "rank 0: allreduce #([0-9]+) \(Float\[[0-9]+\]\) avg of DDP's bucket 0 \([0-9.]+ MiB\): failed: .*Collective timeout: 3\.0+ s .*Not at collective #[0-9]+: rank 1 \(last allreduce #[0-9]+ \(Float\[[0-9]+\]\) avg, finished; its record is fresh: the process is alive but busy outside collectives" "$work/err" ||
    fail "rank 0's error does not name the collective, the bucket and rank 1"
  ;;
flags)
  expect_failure 2 "--collective-timeout='0' is not valid (expected a positive number of seconds)" -- \
    "$lockstep" run --collective-timeout 0 -- true
  expect_failure 2 "--collective-timeout='soon' is not valid" -- "$lockstep" run --collective-timeout soon -- true
  expect_failure 2 "--collective-timeout must be a number of seconds" -- "$lockstep" fit --collective-timeout -1
  LOCKSTEP_TIMEOUT=abc expect_failure 2 "LOCKSTEP_TIMEOUT='abc' is not a valid timeout" -- "$lockstep" run -- true
  # The flag reaches the workers as LOCKSTEP_TIMEOUT, with the heartbeat descriptor.
  "$lockstep" run --collective-timeout 2.5 -- sh -c 'echo "timeout=$LOCKSTEP_TIMEOUT fd=$LOCKSTEP_HEARTBEAT_FD"' \
    >"$work/out" 2>&1 || { cat "$work/out"; fail "lockstep run failed"; }
  grep -q "timeout=2.5.* fd=3" "$work/out" || { cat "$work/out"; fail "workers did not get LOCKSTEP_TIMEOUT / the heartbeat fd"; }
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "hang_e2e[$case_name]: ok"
