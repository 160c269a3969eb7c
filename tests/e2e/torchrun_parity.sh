#!/usr/bin/env bash
# `lockstep run` next to PyTorch's own torchrun (python -m torch.distributed.run), 2 ranks each. Runs only
# where torchrun works: PyPI's torch 2.x (Debian's 1.13 torchrun crashes on Python 3.11).
#
#   torchrun_parity.sh env|ddp LOCKSTEP PYTHON
#
#   env  torchrun_compat.py under both, from the same minimal environment: every variable torchrun gives a
#        worker, lockstep gives too, with the same value, but for those that name one particular job or are
#        documented to differ (listed below, each with the reason).
#   ddp  the seeds' DDP recipe (bench/peer/ddp_peer.py: DistributedDataParallel, DistributedSampler,
#        DataLoader, Adam) on Fashion-MNIST, 1 epoch of 40 batches, under both: the same train_loss,
#        val_loss and val_acc, to the last digit.
set -uo pipefail
case_name=$1 lockstep=$2 python=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "torchrun_parity[$case_name]: $*" >&2; exit 1; }

# launch NAME CMD...: under torchrun (NAME=torchrun) or lockstep run (NAME=lockstep), 2 ranks, from a
# minimal environment; output in $work/NAME.out.
launch() {
  local name=$1
  shift
  local base=(env -i PATH="$PATH" HOME="$HOME" LANG=C.UTF-8)
  if [ "$name" = torchrun ]; then
    "${base[@]}" "$python" -m torch.distributed.run --nproc-per-node 2 --standalone "$@" >"$work/$name.out" 2>&1
  else
    "${base[@]}" "$lockstep" run --nproc-per-node 2 --standalone -- "$python" "$@" >"$work/$name.out" 2>&1
  fi
  local status=$?
  [ "$status" -eq 0 ] || { cat "$work/$name.out"; fail "$name exited with status $status"; }
}

case "$case_name" in
env)
  launch torchrun "$here/torchrun_compat.py" --env-out "$work/torchrun"
  launch lockstep "$here/torchrun_compat.py" --env-out "$work/lockstep"
  "$python" - "$work" <<'PY' || fail "the environments differ"
import json, sys
work = sys.argv[1]
# Values that name one job, or differ by design:
differ = {
    "MASTER_ADDR": "torchrun --standalone names its own host; lockstep 127.0.0.1 (its store listens on loopback)",
    "MASTER_PORT": "a free port chosen per job",
    "TORCHELASTIC_RUN_ID": "a random id per job",
    "TORCHELASTIC_USE_AGENT_STORE": "torchrun's agent serves the store; lockstep's rank 0 does (False)",
    "OMP_NUM_THREADS": "torchrun: 1; lockstep: max(1, cores / workers) (README, lockstep run)",
    "TORCHELASTIC_SIGNALS_TO_HANDLE": "each launcher's own: lockstep run also forwards SIGUSR1 (Slurm's "
                                      "preemption notice) besides torchrun's four",
}
# Set by torchrun, not by lockstep:
absent = {
    "TORCHELASTIC_ERROR_FILE": "torchrun's @record error files; lockstep reports a failed rank's stderr instead",
}
bad = []
for rank in (0, 1):
    t = json.load(open(f"{work}/torchrun.rank{rank}.json"))
    l = json.load(open(f"{work}/lockstep.rank{rank}.json"))
    for key in sorted(t):
        if key in absent:
            continue
        if key not in l:
            bad.append(f"rank {rank}: torchrun sets {key}={t[key]!r}, lockstep run does not")
        elif t[key] != l[key] and key not in differ:
            bad.append(f"rank {rank}: {key}: torchrun {t[key]!r}, lockstep run {l[key]!r}")
    print(f"rank {rank}: {len(t)} variables from torchrun, {len(l)} from lockstep run; "
          f"same values except where they differ by design: {sorted(k for k in differ if k in t)}; "
          f"lockstep only: {sorted(set(l) - set(t))}")
for line in bad:
    print(line, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
  ;;
ddp)
  [ -d /usr/share/datasets/fashion-mnist ] || fail "no Fashion-MNIST (scripts/install-deps.sh installs dataset-fashion-mnist)"
  peer=$here/../../bench/peer/ddp_peer.py
  launch torchrun "$peer" --epochs 1 --limit-train-batches 40 --threads 1
  launch lockstep "$peer" --epochs 1 --limit-train-batches 40 --threads 1
  for name in torchrun lockstep; do
    grep -o '{"epoch".*' "$work/$name.out" | "$python" -c '
import json, sys
r = json.loads(sys.stdin.readline())
print(r["epoch"], r["train_loss"], r["val_loss"], r["val_acc"])' >"$work/$name.metrics" || fail "$name: no epoch record"
    echo "$name: epoch train_loss val_loss val_acc = $(cat "$work/$name.metrics")"
  done
  cmp -s "$work/torchrun.metrics" "$work/lockstep.metrics" || fail "the runs differ"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "torchrun_parity[$case_name]: ok"
