#!/bin/bash
# lockstep on a real Slurm cluster: scripts/slurm-local-cluster.sh starts slurmctld and two slurmd
# (emulated nodes lsnode1, lsnode2 on this host) for each case and stops it afterwards, whatever happens.
# Every job runs a script written by `lockstep slurm`.
# Usage: slurm_e2e.sh CASE LOCKSTEP PYTHON3
#   torchrun  sbatch of the torchrun style (one `lockstep run --nproc-per-node 2` per node), 2 nodes x 2 ranks,
#             lockstep fit on synthetic data: the same final metrics as `lockstep fit --devices 4` on one node;
#             and `lockstep run` under srun with 2 tasks per node refuses, saying why
#   ddp       the same with the ddp style (srun starts the 4 ranks, no launcher; each reads SLURM_*)
#   lightning the same with the lightning style (one task per node running lockstep fit --devices 2 --num-nodes 2);
#             and lockstep fit --devices 2 run in the batch script itself (no srun) is a job of its own
#   fail      a rank killed (SIGKILL) mid-run, in the ddp and the torchrun style: the job ends non-zero, no task left
#   scancel   scancel of a running job ends every rank (no task left, the job gone)
#   preempt   scancel --signal=USR1 mid-run: last.ckpt, every rank exits 75, the script requeues the job, and the
#             requeued run resumes (--resume auto) and ends with the undisturbed run's final metrics
# Exit status 77 (ctest: skipped) with the reason when this machine cannot run a cluster (not root, the
# packages missing, /etc/hosts read-only).
set -u
case_name=$1 lockstep=$(realpath "$2") python=$3
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/slurm-local-cluster.sh"
work=$(mktemp -d /tmp/lockstep-slurm-e2e.XXXXXX)
chmod 0755 "$work"
export LOCKSTEP_SLURM_STATE="$work/cluster"
cleanup() {
  "$cluster" stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "slurm_e2e[$case_name]: $*" >&2
  for f in "$work"/job_*.out; do [ -f "$f" ] && { echo "---- $f"; tail -n 40 "$f"; }; done >&2
  exit 1
}
. "$here/e2e_lib.sh"

start_or_skip "slurm_e2e[$case_name]" "the local Slurm cluster" "$cluster" start
export SLURM_CONF="$LOCKSTEP_SLURM_STATE/slurm.conf"

# Small and fast: 4 ranks x 32 images, 8 steps per epoch.
fit_flags=(--data synthetic --synthetic-size 1024 --batch-size 32 --model mlp --progress off --limit-val-batches 2
  --threads 1 --num-workers 0)

# reference EPOCHS: `lockstep fit --devices 4` on this one node, outside Slurm.
reference() {
  env -u SLURM_CONF "$lockstep" fit --devices 4 "${fit_flags[@]}" --max-epochs "$1" --metrics-file "$work/ref.jsonl" \
    >"$work/ref.out" 2>&1 || { cat "$work/ref.out"; fail "the reference run failed"; }
}

# script STYLE NAME FIT_ARGS...: writes $work/NAME.sbatch with `lockstep slurm`, 2 nodes x 2 ranks.
script() {
  local style=$1 name=$2
  shift 2
  "$lockstep" slurm --style "$style" --nodes 2 --ntasks-per-node 2 --time 10 --job-name "$name" \
    --output "$work/job_%j.out" --lockstep "$lockstep" -o "$work/$name.sbatch" -- "$lockstep" fit "${fit_flags[@]}" "$@" \
    2>"$work/slurm.err" || { cat "$work/slurm.err"; fail "lockstep slurm failed"; }
  bash -n "$work/$name.sbatch" || fail "$name.sbatch is not valid bash"
}

# submit NAME [SBATCH_FLAGS...]: prints the job id.
submit() {
  local name=$1
  shift
  sbatch --parsable --chdir="$work" "$@" "$work/$name.sbatch" || fail "sbatch $name failed"
}

# job_state ID: COMPLETED, FAILED, RUNNING, ... ("" once the job has left the controller).
job_state() { scontrol show job "$1" -o 2>/dev/null | grep -Eo 'JobState=[A-Z_]+' | cut -d= -f2; }

# wait_done ID SECONDS: waits until the job has ended; prints its final state and exit code ("STATE rc:sig").
wait_done() {
  local id=$1 limit=$2 start=$SECONDS line state
  while [ $((SECONDS - start)) -lt "$limit" ]; do
    line=$(scontrol show job "$id" -o 2>/dev/null)
    state=$(echo "$line" | grep -Eo 'JobState=[A-Z_]+' | cut -d= -f2)
    case $state in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | BOOT_FAIL | DEADLINE)
      echo "$state $(echo "$line" | grep -Eo ' ExitCode=[0-9:]+' | cut -d= -f2)"
      return 0
      ;;
    esac
    sleep 0.5
  done
  fail "job $id did not end within $limit s (state $(job_state "$id"))"
}

# no_task_left PATTERN: no process whose command line holds PATTERN (a rank of the job) within 10 s.
no_task_left() {
  for _ in $(seq 1 20); do
    pgrep -f -- "$1" >/dev/null || return 0
    sleep 0.5
  done
  ps -ef | grep -F -- "$1" | grep -v grep >&2
  fail "processes of the job are left: $1"
}

# wait_for_steps FILE: waits until FILE holds a step record (the ranks are training).
wait_for_steps() {
  for _ in $(seq 1 120); do
    grep -q '"batch"' "$1" 2>/dev/null && return 0
    sleep 0.25
  done
  fail "no training step logged in $1 within 30 s"
}

case $case_name in
torchrun | ddp | lightning)
  reference 2
  if [ "$case_name" = lightning ]; then
    script lightning job --max-epochs 2 --metrics-file "$work/m.jsonl" --devices 2 --num-nodes 2
  else
    script "$case_name" job --max-epochs 2 --metrics-file "$work/m.jsonl"
  fi
  id=$(submit job)
  result=$(wait_done "$id" 120)
  [ "$result" = "COMPLETED 0:0" ] || fail "job $id ended $result, expected COMPLETED 0:0"
  same_final "$python" 4 "$work/ref.jsonl" "$work/m.jsonl"
  if [ "$case_name" = lightning ]; then
    # Run in the batch script itself (no srun, so no SLURM_STEP_ID): Slurm's variables describe the job, not
    # this process, and lockstep fit starts its --devices ranks on this node as a job of its own.
    printf '#!/bin/bash\n%q fit %s --devices 2 --max-epochs 1 --metrics-file %q\n' "$lockstep" "${fit_flags[*]}" \
      "$work/batch.jsonl" >"$work/batch.sbatch"
    id=$(submit batch --nodes=2 --ntasks-per-node=2 --output="$work/job_%j.out")
    result=$(wait_done "$id" 60)
    [ "$result" = "COMPLETED 0:0" ] || fail "lockstep fit in the batch script: job $id ended $result"
    grep -q '"world_size":2' "$work/batch.jsonl" || fail "lockstep fit in the batch script did not run 2 ranks"
  fi
  if [ "$case_name" = torchrun ]; then
    # One launcher per node only: srun with 2 tasks per node would start every node's workers twice.
    srun --chdir="$work" -N2 --ntasks-per-node=2 "$lockstep" run --nproc-per-node 1 -- true >"$work/twice.out" 2>&1 \
      && { cat "$work/twice.out"; fail "lockstep run under srun with 2 tasks per node did not refuse"; }
    grep -q "srun started 2 tasks on this node (SLURM_STEP_TASKS_PER_NODE)" "$work/twice.out" \
      || { cat "$work/twice.out"; fail "no reason given for refusing 2 tasks per node"; }
  fi
  ;;
fail)
  # Rank 1 kills itself (SIGKILL) at step 3: the job must fail with that rank's status, 137, say which rank
  # died, and leave no task behind. ($(...) runs in a subshell: `|| exit 1` carries its fail out.)
  for style in ddp torchrun; do
    script "$style" "fail_$style" --max-epochs 50 --metrics-file "$work/fail_$style.jsonl"
    start=$SECONDS
    id=$(LOCKSTEP_FAULT=1:3 submit "fail_$style") || exit 1
    result=$(wait_done "$id" 90) || exit 1
    [ "$result" = "FAILED 137:0" ] || fail "$style: job $id ended '$result', expected 'FAILED 137:0' (rank 1 killed)"
    case $style in
    ddp) died="task 1: Killed" ;;  # srun names the task
    torchrun) died="rank 1 (local rank 1, pid" ;;  # lockstep run names the rank, then how it ended
    esac
    grep -F "$died" "$work/job_$id.out" | grep -q "Killed\|killed by signal 9" ||
      fail "$style: job $id's output does not say that rank 1 was killed ('$died')"
    no_task_left "$work/fail_$style.jsonl"
    echo "$style: a killed rank ended job $id ($result) after $((SECONDS - start)) s, no task left"
  done
  ;;
scancel)
  script torchrun long --max-epochs 200 --log-every-n-steps 1 --metrics-file "$work/long.jsonl"
  id=$(submit long)
  wait_for_steps "$work/long.jsonl"
  start=$SECONDS
  scancel "$id" || fail "scancel $id failed"
  result=$(wait_done "$id" 60)
  case $result in "CANCELLED "*) ;; *) fail "job $id ended $result after scancel, expected CANCELLED" ;; esac
  no_task_left "$work/long.jsonl"
  echo "scancel ended job $id and every rank after $((SECONDS - start)) s"
  ;;
preempt)
  reference 6
  script torchrun pre --max-epochs 6 --log-every-n-steps 1 --ckpt-dir "$work/ck" --metrics-file "$work/pre.jsonl"
  grep -q -- '--resume auto' "$work/pre.sbatch" || fail "lockstep slurm did not add --resume auto"
  id=$(submit pre)
  wait_for_steps "$work/pre.jsonl"
  scancel --signal=USR1 "$id" || fail "scancel --signal=USR1 $id failed"
  result=$(wait_done "$id" 150)
  [ "$result" = "COMPLETED 0:0" ] || fail "job $id ended $result, expected COMPLETED 0:0 after its requeue"
  out="$work/job_$id.out"
  grep -Eq "preempted by SIGUSR1 at step [0-9]+ .*exiting with status 75" "$out" || fail "no preemption report in $out"
  grep -q "lockstep slurm: job $id was preempted (checkpoint written, exit status 75): requeueing it" "$out" \
    || fail "the script did not requeue the job"
  grep -q "resumed from $work/ck/last.ckpt" "$out" || fail "the requeued run did not resume from last.ckpt"
  restarts=$(scontrol show job "$id" -o | grep -Eo 'Restarts=[0-9]+' | cut -d= -f2)
  [ "${restarts:-0}" -ge 1 ] || fail "job $id was not requeued (Restarts=${restarts:-?})"
  same_final "$python" 4 "$work/ref.jsonl" "$work/pre.jsonl"
  ;;
*)
  fail "unknown case (expected torchrun, ddp, lightning, fail, scancel or preempt)"
  ;;
esac
echo "slurm_e2e[$case_name]: ok"
