#!/bin/bash
# In-place recovery across emulated hosts (scripts/netns-hosts.sh: network namespaces on one bridge): host 0
# runs `lockstep run --recovery in-place --nproc-per-node 2 --rdzv-endpoint 10.231.0.1:PORT` of a user's own
# DDP loop (tests/ddp/elastic_ddp_worker.cpp) and serves the job's store there; host 1 runs the same command,
# finds the endpoint on another host and joins: the world grows from 2 to 4 ranks at a step boundary. Then
# host 1 is lost, so that no launcher there announces its workers: host 0's launcher does, and the two ranks
# of host 0 go on. The job must exit 0 on host 0 and end on the parameters of one process that trained the
# same global batches with the world 2, then 4, then 2 at the same steps (float64, to 1e-9).
#
#   elastic_hosts_inplace_e2e.sh CASE LOCKSTEP WORKER
#   CASE: host_killed       kill -9 of every process on host 1: its launcher's store connection closes, and
#                           host 0's launcher learns it at once (the store's live key)
#         launcher_stopped  host 1's launcher is stopped (SIGSTOP) and its workers killed: its connection
#                           stays open, its beats stop, and host 0's launcher waits out the heartbeat timeout
# Exit status 77 (ctest: skipped) with the reason where the machine cannot create namespaces.
set -u
export LOCKSTEP_JOB_SECRET=e2e-secret-of-the-emulated-nodes-0123  # a job that spans nodes needs one (issue 42)
case_name=$1 lockstep=$(realpath "$2") worker=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
hosts="$here/../../scripts/netns-hosts.sh"
export LOCKSTEP_NETNS="lsip${case_name:0:1}"
work=$(mktemp -d /tmp/lockstep-inplace-hosts.XXXXXX)
cleanup() {
  "$hosts" stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "elastic_hosts_inplace_e2e: $*"
  for f in "$work"/host*.log; do [ -f "$f" ] && { echo "---- $f (steps left out)"; grep -v '\] step ' "$f" | tail -n 30; }; done
  exit 1
}
. "$here/e2e_lib.sh"
WAIT_FOR_S=120  # wait_for's bound, well within the test's 240 s
start_or_skip "elastic_hosts_inplace_e2e" "the emulated hosts" "$hosts" start --hosts 2

# node N: host N's launcher, the same command on both hosts. Rank id 3 (host 1's second worker) holds at
# step 40, where the test kills host 1; the ranks of host 0 wait at step 15 for the two joiners.
node() {
  ip netns exec "${LOCKSTEP_NETNS}$1" timeout 200 "$lockstep" run --nproc-per-node 2 \
    --rdzv-endpoint 10.231.0.1:29410 --rdzv-id inplace-hosts --recovery in-place --heartbeat-timeout 3 -- \
    "$worker" --out "$work/final.pt" --wait-for-join 15:2 --hold "3:40:start:$work/hold" >"$work/host$1.log" 2>&1 &
}

node 0
pid0=$!
wait_for "$work/host0.log" "[rank 0] step 1 "
node 1
wait_for "$work/host1.log" "serves a running job: its 2 worker(s) join it as rank id(s) 2..3"
wait_for "$work/hold" ""
# host 1's launcher: the process there running `$lockstep run ...` (under `ip netns exec` and `timeout`).
launcher1=""
for p in $("$hosts" pids 1); do
  case "$(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null)" in "$lockstep run "*) launcher1=$p ;; esac
done
[ -n "$launcher1" ] || fail "no launcher found on host 1"
case $case_name in
  host_killed)
    kill -9 $("$hosts" pids 1)
    echo "killed every process on host 1 (rank id 3 held at step 40)"
    reason="its launcher on .* closed its connection to the store"
    ;;
  launcher_stopped)
    kill -STOP "$launcher1"
    kill -9 $(pgrep -P "$launcher1")
    echo "stopped host 1's launcher and killed its workers (rank id 3 held at step 40)"
    reason="its launcher on .* sent no heartbeat for"
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
wait "$pid0" || fail "host 0's launcher exited $?"
grep -v '\] step ' "$work/host0.log"
grep -q "$reason" "$work/host0.log" || fail "host 0 did not say why host 1's ranks were lost ('$reason')"

worlds="2@0"
while read -r step size; do
  worlds="$worlds,$size@$step"
done < <(sed -n 's/^\[rank 0\] membership change at step \([0-9]*\): .* -> \([0-9]*\) (generation.*/\1 \2/p' "$work/host0.log")
[ "$worlds" = "2@0,4@16,2@40" ] || fail "the worlds were $worlds, not 2@0,4@16,2@40"
"$worker" --reference "$worlds" --out "$work/reference.pt" || fail "the reference did not run"
"$worker" --compare "$work/final.pt" "$work/reference.pt" || fail "the parameters differ from the reference ($worlds)"
echo "PASS: worlds $worlds across two emulated hosts"
