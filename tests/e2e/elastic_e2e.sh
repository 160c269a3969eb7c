#!/bin/bash
# Elastic rounds (lockstep run --rdzv-backend c10d --nnodes 2:3) on three emulated hosts
# (scripts/netns-hosts.sh: each host a network namespace with its own address, all on one bridge), each
# running one `lockstep run` of the same `lockstep fit` job on Fashion-MNIST.
# Usage: elastic_e2e.sh CASE LOCKSTEP PYTHON3
#   shrink_grow  host 2 is killed (kill -9 of every process on it: launcher and workers) once the job has
#                checkpointed: the job goes on with 2 nodes (round 1); a new launcher started on host 2 then
#                joins it (round 2, 3 nodes again), and all three finish. Checked: every launcher exits 0;
#                host 0's log names each round, its nodes, who left or joined and why it began; the job
#                trained every epoch and ends in the 3-node world; its final val_acc is within 0.03 of an
#                undisturbed run of the same job (3 ranks, same global batch, same seed) — the rounds lose
#                the steps since the last checkpoint and train some samples of the epoch again, so the
#                weights differ, but the model trains as well.
#   sigstop      host 2's processes are stopped (SIGSTOP) once the job has checkpointed: within the
#                keep-alive timeout the other nodes drop it, naming it, and finish with 2 nodes.
# Exit status 77 (ctest: skipped) with the reason where the machine cannot create namespaces.
set -u
export LOCKSTEP_JOB_SECRET=e2e-secret-of-the-emulated-nodes-0123  # a job that spans nodes needs one (issue 42)
case_name=$1 lockstep=$(realpath "$2") python=$3
here=$(cd "$(dirname "$0")" && pwd)
hosts="$here/../../scripts/netns-hosts.sh"
export LOCKSTEP_NETNS="lsel-$case_name"
work=$(mktemp -d /tmp/lockstep-elastic-e2e.XXXXXX)
cleanup() {
  "$hosts" stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "elastic_e2e[$case_name]: $*" >&2
  for f in "$work"/host*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 40 "$f"; }; done >&2
  exit 1
}
. "$here/e2e_lib.sh"

[ -d /usr/share/datasets/fashion-mnist ] || fail "no Fashion-MNIST (scripts/install-deps.sh installs dataset-fashion-mnist)"
start_or_skip "elastic_e2e[$case_name]" "the emulated hosts" "$hosts" start --hosts 3

# The job: 2 epochs of Fashion-MNIST, 64 images per rank and step, a checkpoint every 20 steps in a
# directory every host sees (the namespaces share the file system, as nodes share a network file system).
fit_flags=(--data fashion-mnist --model mlp --batch-size 64 --max-epochs 2 --seed 7 --progress off --threads 1
  --num-workers 0 --ckpt-every-n-steps 20)
# Rank 0 sleeps 30 ms a batch in the first round only (LOCKSTEP_FAULT acts in the run with
# TORCHELASTIC_RESTART_COUNT 0), so that the job is still in its first epoch when the test acts on it.
slow=(env LOCKSTEP_FAULT=0:1:slow30)

# on_host N CMD...: runs CMD on emulated host N.
on_host() {
  local n=$1
  shift
  ip netns exec "${LOCKSTEP_NETNS}$n" "$@"
}

# node N LOG: host N's launcher of the elastic job, in the background (output in $work/LOG).
node() {
  local n=$1 log=$2
  on_host "$n" timeout 300 "$lockstep" run --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint 10.231.0.1:29400 --rdzv-id "elastic-$case_name" --max-restarts 3 \
    --rdzv-conf last_call_timeout=2,keep_alive_interval=1,keep_alive_max_attempt=3 -- \
    "${slow[@]}" "$lockstep" fit "${fit_flags[@]}" --ckpt-dir "$work/ckpt" --metrics-file "$work/m.jsonl" \
    >"$work/$log" 2>&1 &
}

# start_three: nodes 0, 1, 2 join in that order; returns once the job runs on 3 nodes and has written its
# first checkpoint. Sets pid0 and pid1.
start_three() {
  node 0 host0.log
  pid0=$!
  wait_for "$work/host0.log" "joined round 0"
  node 1 host1.log
  pid1=$!
  wait_for "$work/host1.log" "joined round 0"
  node 2 host2.log
  wait_for "$work/host0.log" "round 0: 3 node(s)"
  local deadline=$((SECONDS + 180))
  until [ -f "$work/ckpt/last.ckpt" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "no checkpoint within 180 s"
    sleep 0.1
  done
}

# finished NAME PID: that launcher exited 0.
finished() {
  wait "$2" || fail "$1's launcher exited $?"
}

# no_process_left N: nothing runs on host N any more (a hang bound of 30 s).
no_process_left() {
  local deadline=$((SECONDS + 30))
  while [ -n "$("$hosts" pids "$1")" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "processes are left on host $1: $("$hosts" pids "$1" | tr '\n' ' ')"
    sleep 0.1
  done
}

# The rounds as host 0's launcher told them, also kept in elastic_<case>_rounds.txt in the test's working
# directory, which .ci/run prints after the suite (CI shows each round).
show_rounds() {
  grep -E "round [0-9]+: |ended|stopped answering|began because" "$work/host0.log" | sed 's/^/  /' |
    tee "elastic_${case_name}_rounds.txt"
}

case $case_name in
shrink_grow)
  "$lockstep" fit --devices 3 "${fit_flags[@]}" --ckpt-dir "$work/ref-ckpt" --metrics-file "$work/ref.jsonl" >"$work/ref.out" 2>&1 ||
    { cat "$work/ref.out"; fail "the undisturbed run failed"; }
  start_three
  kill -9 $("$hosts" pids 2)
  no_process_left 2
  wait_for "$work/host0.log" "round 1: 2 node(s)"
  # The two nodes train: round 1 resumes and writes a checkpoint of its own before the late node comes.
  touch "$work/round1"
  deadline=$((SECONDS + 180))
  until [ -n "$(find "$work/ckpt/last.ckpt" -newer "$work/round1" 2>/dev/null)" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "the 2-node round wrote no checkpoint within 180 s"
    sleep 0.1
  done
  node 2 host2b.log
  pid2=$!
  finished "host 0" "$pid0"
  finished "host 1" "$pid1"
  finished "host 2 (the late one)" "$pid2"
  show_rounds
  log=$work/host0.log
  grep -Fq "round 0: 3 node(s)" "$log" || fail "round 0 did not start with 3 nodes"
  grep -Eq "round 1: 2 node\(s\): .*\(left since round 0: 10\.231\.0\.3 " "$log" ||
    fail "round 1 does not name host 2 (10.231.0.3) as gone"
  grep -Eq "round 2: 3 node\(s\): .*\(joined: 10\.231\.0\.3 .*began because 1 node\(s\) asked to join" "$log" ||
    fail "round 2 does not name host 2 as joined, or why it began"
  # Rank 0 of each later round (on whichever node came first) resumed from the last checkpoint.
  [ "$(cat "$work"/host*.log | grep -c "\] resumed from $work/ckpt/last.ckpt")" -ge 2 ] ||
    fail "rounds 1 and 2 did not both resume from the checkpoint"
  "$python" - "$work/ref.jsonl" "$work/m.jsonl" <<'PY' || fail "the elastic job did not train as well as the undisturbed one"
import json, sys
def epochs(path):
    return [json.loads(l) for l in open(path) if '"batch"' not in l]
ref, got = epochs(sys.argv[1]), epochs(sys.argv[2])
assert ref and got, "no epoch records"
assert max(r["epoch"] for r in got) == max(r["epoch"] for r in ref), "the elastic job did not train every epoch"
last, ref_last = max(got, key=lambda r: r["epoch"]), max(ref, key=lambda r: r["epoch"])
assert last["world_size"] == 3, f"the job ended with world size {last['world_size']}, not 3"
print(f"final val_acc {last['val_acc']:.4f} (undisturbed {ref_last['val_acc']:.4f}), "
      f"val_loss {last['val_loss']:.4f} (undisturbed {ref_last['val_loss']:.4f})")
assert abs(last["val_acc"] - ref_last["val_acc"]) <= 0.03, "val_acc differs by more than 0.03"
PY
  ;;
sigstop)
  start_three
  kill -STOP $("$hosts" pids 2)
  wait_for "$work/host0.log" "round 1: 2 node(s)"
  finished "host 0" "$pid0"
  finished "host 1" "$pid1"
  show_rounds
  grep -Eq "node 2 \(10\.231\.0\.3, host [^)]*\) stopped answering: no keep-alive for" "$work/host0.log" ||
    fail "host 0 does not name the stopped node"
  kill -9 $("$hosts" pids 2) 2>/dev/null
  no_process_left 2
  ;;
*)
  echo "elastic_e2e: unknown case '$case_name' (shrink_grow, sigstop)" >&2
  exit 2
  ;;
esac
echo "elastic_e2e[$case_name]: ok"
