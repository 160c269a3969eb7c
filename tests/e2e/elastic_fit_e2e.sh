#!/usr/bin/env bash
# In-place recovery of the Trainer end to end: `lockstep fit --devices 3 --elastic` on Fashion-MNIST, one
# rank killed (SIGKILL) while it trains. The job must exit 0, say the change once (line and metrics record),
# and end on the weights of the run it is meant to equal: 3 ranks up to the change's step, then 2 ranks on
# the rest of the epoch re-sharded over them. That run is made the other way lockstep can: 3 ranks stopped
# at that step (--max-steps, last.ckpt), resumed on 2 (--resume last), which re-shards the same way. The
# weights match to float tolerance (the same collectives in the same order, on Gloo both times).
#
# The join case grows the job instead: `lockstep run --recovery in-place --nproc-per-node 2 --rdzv-endpoint`
# of `lockstep fit --elastic`, and the same command again, whose 2 ranks join at a step boundary; the weights
# equal a run of 2 ranks stopped at that step and resumed on 4.
#
#   elastic_fit_e2e.sh CASE LOCKSTEP PYTHON      CASE: kill_rank0 | kill_rank2 | kill_rank2_global | join | join_global
#   ELASTIC_FIT_FLAGS: more flags for every run (scripts/gpu-check.sh: "--accelerator gpu --data-dir DIR")
set -u
export LOCKSTEP_JOB_SECRET=e2e-secret-of-the-emulated-nodes-0123  # a job that spans nodes needs one (issue 42)
case_name=$1 lockstep=$2 python=$3
here=$(dirname "$0")
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL ($case_name): $*"
  tail -30 "$work/log" 2>/dev/null
  exit 1
}
common=(--max-epochs 2 --limit-train-batches 120 --dropout 0 --seed 3 --backend gloo --log-every-n-steps 1)
read -r -a more <<<"${ELASTIC_FIT_FLAGS:-}"
common+=("${more[@]}")

# equals_resume FROM TO STEP [FLAGS...]: the in-place run's weights equal FROM ranks stopped at STEP
# (--max-steps, last.ckpt) and resumed on TO ranks (--resume last), which re-shards the rest of the epoch the
# same way. Both parts take the in-place run's own flags ($extra); the resumed part FLAGS instead when given.
extra=()
equals_resume() {
  local from=$1 to=$2 step=$3
  shift 3
  local rest=("${extra[@]}")
  [ $# -gt 0 ] && rest=("$@")
  rm -rf "$work/b"
  "$lockstep" fit --devices "$from" "${common[@]}" "${extra[@]}" --max-steps "$step" --ckpt-dir "$work/b" \
    >"$work/log" 2>&1 || fail "the reference's first part failed"
  "$lockstep" fit --devices "$to" "${common[@]}" "${rest[@]}" --resume last --ckpt-dir "$work/b" \
    >"$work/log" 2>&1 || fail "the reference's resumed part failed"
  "$python" "$here/compare_safetensors.py" --close "$work/a/final.safetensors" "$work/b/final.safetensors" ||
    fail "in place ($from -> $to ranks at step $step) differs from resuming on $to ranks (${rest[*]}) there"
  echo "PASS ($case_name): the change at step $step equals a resume onto $to ranks there (${rest[*]})"
}

if [ "$case_name" = join ] || [ "$case_name" = join_global ]; then
  # join_global keeps the global batch: 2 ranks accumulating 2 go on as 4 accumulating 1.
  [ "$case_name" = join_global ] && extra=(--accumulate-grad-batches 2 --keep-global-batch)
  # Rank 0 waits after step 30 until both joiners asked (LOCKSTEP_FAULT=0:30:joins2): they are admitted at
  # step 31's vote, whenever the second launcher got them there.
  port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  run=("$lockstep" run --nproc-per-node 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "fitjoin$port"
    --recovery in-place -- env LOCKSTEP_FAULT=0:30:joins2 "$lockstep" fit --elastic "${common[@]}" "${extra[@]}"
    --metrics-file "$work/m.jsonl" --ckpt-dir "$work/a")
  "${run[@]}" >"$work/log" 2>&1 &
  first=$!
  for _ in $(seq 1 1200); do  # a hang bound of 60 s: the first launcher's job trains
    grep -q '"step":1,' "$work/m.jsonl" 2>/dev/null && break
    sleep 0.05
  done
  "${run[@]}" >"$work/log2" 2>&1 || fail "the joining launcher exited $?"
  wait "$first" || fail "the first launcher exited $?"
  cat "$work/log" "$work/log2"
  grep -q 'joined the running job at step' "$work/log2" || fail "no rank said it joined"
  line=$(grep -m1 'membership change at step' "$work/log") || fail "no membership change line"
  grep -q 'rank(s) 2, 3 joined; world 2 -> 4' <<<"$line" || fail "the change is not 2 -> 4: $line"
  step=$(sed -n 's/.*membership change at step \([0-9]*\) .*/\1/p' <<<"$line")
  if [ "$case_name" = join_global ]; then
    grep -q 'global batch 256 kept: each rank accumulates 1 batch' <<<"$line" ||
      fail "the change does not say the global batch was kept: $line"
    equals_resume 2 4 "$step" --accumulate-grad-batches 1
  fi
  equals_resume 2 4 "$step"
  exit 0
fi

if [ "$case_name" = kill_rank2_global ]; then
  # --keep-global-batch: 3 ranks accumulating 2 batches lose rank 2 after step 75 (epoch 2); the 2 left
  # accumulate 3, so that each step still takes 6 batches of 64, at the rate --lr-scaling gave 384. The
  # weights equal 3 ranks stopped at that step and resumed on 2 accumulating 3; and the same resumed with
  # the run's own flags (the checkpoint keeps its 6 batches a step).
  extra=(--accumulate-grad-batches 2 --keep-global-batch --lr-scaling linear)
  LOCKSTEP_FAULT=2:75 "$lockstep" fit --devices 3 --elastic "${common[@]}" "${extra[@]}" \
    --metrics-file "$work/m.jsonl" --ckpt-dir "$work/a" >"$work/log" 2>&1 || fail "lockstep fit --elastic exited $?"
  cat "$work/log"
  line=$(grep -m1 'membership change at step' "$work/log") || fail "no membership change line"
  grep -q 'world 3 -> 2 .*; global batch 384 kept: each rank accumulates 3 batch(es)' <<<"$line" ||
    fail "the change does not say the global batch was kept: $line"
  step=$(sed -n 's/.*membership change at step \([0-9]*\) .*/\1/p' <<<"$line")
  equals_resume 3 2 "$step" --accumulate-grad-batches 3 --lr-scaling linear
  equals_resume 3 2 "$step"
  grep -q 'global batch 384 kept: each rank accumulates 3' "$work/log" || fail "the resume did not keep it"
  exit 0
fi

victim=${case_name#kill_rank}

# Rank $victim is killed (SIGKILL) right after its optimizer step 150, in the second epoch (LOCKSTEP_FAULT,
# apps/lockstep/fault_injection.h): the others are then in step 151, which they drop.
LOCKSTEP_FAULT="$victim:150" "$lockstep" fit --devices 3 --elastic "${common[@]}" --metrics-file "$work/m.jsonl" \
  --ckpt-dir "$work/a" >"$work/log" 2>&1 || fail "lockstep fit --elastic exited $?"
cat "$work/log"
line=$(grep -m1 'membership change at step' "$work/log") || fail "no membership change line"
step=$(sed -n 's/.*membership change at step \([0-9]*\) .*/\1/p' <<<"$line")
grep -q '"membership_change_s"' "$work/m.jsonl" || fail "no membership record in the metrics file"
[ -s "$work/a/final.safetensors" ] || fail "no final weights"

# The same change made by a checkpoint: 3 ranks to step $step, then 2 ranks from there.
equals_resume 3 2 "$step"
