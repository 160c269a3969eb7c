#!/bin/bash
# Hangs become errors (issue 7), with real ranks of `lockstep fit`.
# Usage: hang_e2e.sh CASE LOCKSTEP PYTHON3
#   stop:  rank 1 SIGSTOPs itself after step 3 (shm backend): the job ends non-zero within the collective
#          timeout + 5 s, naming rank 1, and no worker is left behind.
#   hang:  rank 1 blocks forever outside collectives after step 3 (a data loader that never returns; gloo):
#          the same, and the error says rank 1 is alive but busy outside collectives.
#   extra: rank 1 issues one all-reduce the others do not (a branch taken on one rank; gloo): the error
#          names both ranks' collectives, long before the collective timeout.
#   named: the same hang, but the ranks' own collective timeout (3 s) ends it before the launcher's (100 s):
#          rank 0's error names the collective, its number, DDP's bucket, and rank 1 as not arrived.
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

# run_faulty FAULT EXTRA_FLAGS...: runs the job with the fault, records its status and wall time.
run_faulty() {
  local fault=$1
  shift
  local start end
  start=$(date +%s.%N)
  LOCKSTEP_FAULT=$fault "$lockstep" fit $common "$@" >"$work/out" 2>"$work/err"
  status=$?
  end=$(date +%s.%N)
  elapsed=$("$python" -c "print(round($end - $start, 1))")
  cat "$work/out" "$work/err"
  echo "exit status $status after $elapsed s"
  [ "$status" -ne 0 ] || fail "the job exited 0 despite the fault $fault"
  # Nothing of this job may survive it (the stopped rank included).
  sleep 0.5
  if pgrep -f -- "$work" >/dev/null; then
    pgrep -af -- "$work"
    fail "processes of the job are still running"
  fi
}

# within SECONDS: the job ended within SECONDS of its start.
within() {
  "$python" -c "import sys; sys.exit(0 if $elapsed <= $1 else 1)" ||
    fail "the job took $elapsed s, more than $1 s"
}

case "$case_name" in
stop)
  run_faulty 1:3:stop --collective-timeout $timeout_s
  # Start-up plus 3 steps takes a few seconds; then the timeout, then at most 5 s to stop everything.
  within $((timeout_s + 5 + 10))
  grep -Eq "rank 1 \(local rank 1, pid [0-9]+\) sent no heartbeat for [0-9.]+ s|waiting for rank\(s\) 1 \(alive" "$work/err" ||
    fail "no message names rank 1 as the stalled rank"
  ;;
hang)
  run_faulty 1:3:hang --collective-timeout $timeout_s --backend gloo
  within $((timeout_s + 5 + 10))
  grep -Eq "rank 1 \(local rank 1, pid [0-9]+\) reached no collective for [0-9.]+ s|Not at collective #[0-9]+: rank 1 \(last allreduce" "$work/err" ||
    fail "no message names rank 1 as stuck outside collectives"
  ;;
extra)
  # A collective timeout of 60 s: the mismatch must be reported long before it.
  run_faulty 1:3:extra --collective-timeout 60 --backend gloo
  within 30
  grep -Eq "the ranks called different collectives: rank [01] called allreduce #[0-9]+ \(Float\[[0-9]+\]\) .* but rank [01] called allreduce #[0-9]+ \(Float\[[0-9]+\]\)" "$work/err" ||
    fail "the error does not name both ranks' collectives"
  grep -q "Float\[3\]" "$work/err" || fail "the error does not show rank 1's extra all-reduce (Float[3])"
  ;;
named)
  start=$(date +%s.%N)
  LOCKSTEP_TIMEOUT=100 LOCKSTEP_FAULT=1:3:hang "$lockstep" run --nproc-per-node 2 -- "$lockstep" fit \
    --data synthetic --synthetic-size 512 --batch-size 32 --max-epochs 2 --progress off --backend gloo \
    --collective-timeout 3 --metrics-file "$work/metrics.jsonl" >"$work/out" 2>"$work/err"
  status=$?
  elapsed=$("$python" -c "print(round($(date +%s.%N) - $start, 1))")
  cat "$work/out" "$work/err"
  [ "$status" -ne 0 ] || fail "the job exited 0 despite the hang"
  within 25
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
