#!/bin/bash
# Checkpoints and resume of `lockstep fit`, with real processes (2 ranks, synthetic data, seed MLP with
# dropout: so every rank's generator state matters).
# Usage: resume_e2e.sh CASE LOCKSTEP PYTHON3
#   mid_epoch   stop at --max-steps 11 (epoch 2, batch 3), resume: every step's loss and every epoch's
#               metrics after the resume point equal the uninterrupted run's, bit for bit
#   epoch_end   the same, stopped at the end of the first epoch
#   accumulate  the same with --accumulate-grad-batches 2 and checkpoints every 2 steps
#   world_size  an epoch-end checkpoint of 2 ranks resumes on 1; a mid-epoch one re-shards the rest of the
#               epoch onto 1 rank; a checkpoint inside that re-sharded epoch resumes exactly on 1 rank
#   restart     kill -9 of a rank (and of rank 0 inside a checkpoint write) with --max-restarts: the job
#               finishes with the undisturbed run's records
#   preempt     SIGUSR1 / SIGTERM to the launcher: a checkpoint at the next step, exit 75 / 143, and the
#               resumed run ends with the undisturbed run's records
#   bad_resume  a missing file, a file that is not a checkpoint, a torn one, one with a flipped byte
#               (checksum), another model, optimizer or image shape: clear errors naming the file and the
#               fix, exit != 0, nothing written into the checkpoint directory or the metrics file
set -u
case_name=$1 lockstep=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "resume_e2e[$case_name]: $*" >&2; exit 1; }
. "$(dirname "$0")/e2e_lib.sh"

fit() {
  "$lockstep" fit --data synthetic --synthetic-size 512 --batch-size 32 --max-epochs 3 --model "${MODEL:-mlp}" --progress off \
    --limit-val-batches 2 --log-every-n-steps 1 --threads 1 "$@"
}

# same_after FULL RESUMED FIRST_STEP: the resumed run's records equal the full run's from FIRST_STEP on
# (steps) and for every epoch it reports (epochs), timings aside; and it reported every epoch it should.
same_after() {
  "$python" - "$@" <<'PY' || exit 1
import json, sys
full_path, resumed_path, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
timing = {"epoch_s", "val_s", "samples_per_s", "peak_rss_mb", "peak_cuda_mb", "breakdown"}  # measurements, not results
def load(path):
    steps, epochs = {}, {}
    for line in open(path):
        r = json.loads(line)
        if "batch" in r:
            steps[r["step"]] = r
        else:
            epochs[r["epoch"]] = {k: v for k, v in r.items() if k not in timing}
    return steps, epochs
full_steps, full_epochs = load(full_path)
res_steps, res_epochs = load(resumed_path)
want_steps = sorted(s for s in full_steps if s >= first)
assert sorted(res_steps) == want_steps, f"resumed run logged steps {sorted(res_steps)}, expected {want_steps}"
for s in want_steps:
    assert res_steps[s] == full_steps[s], f"step {s}: resumed {res_steps[s]} != uninterrupted {full_steps[s]}"
assert res_epochs, "the resumed run reported no epoch"
for e, m in res_epochs.items():
    assert m == full_epochs[e], f"epoch {e}: resumed {m} != uninterrupted {full_epochs[e]}"
assert max(res_epochs) == max(full_epochs), "the resumed run did not reach the last epoch"
print(f"identical: {len(want_steps)} steps from step {first}, epochs {sorted(res_epochs)}")
PY
}

# stop_and_resume STOP_STEP REPORT EXTRA_FLAGS...: uninterrupted run, run stopped at STOP_STEP, resumed run;
# compare. REPORT is a line only the stopped run prints: "stopped at max_steps N (epoch ..." when the stop
# cuts an epoch, its step count ("N optimizer step(s)") when it falls on an epoch's end. Its records must
# end at STOP_STEP too (the uninterrupted run's go further).
stop_and_resume() {
  local stop=$1 report=$2
  shift 2
  fit --devices 2 --metrics-file "$work/full.jsonl" --ckpt-dir "$work/ck_full" "$@" >"$work/full.out" 2>&1 || { cat "$work/full.out"; fail "uninterrupted run failed"; }
  fit --devices 2 --metrics-file "$work/first.jsonl" --ckpt-dir "$work/ck" --max-steps "$stop" "$@" >"$work/first.out" 2>&1 \
    || { cat "$work/first.out"; fail "stopped run failed"; }
  grep -qF "$report" "$work/first.out" || { cat "$work/first.out"; fail "the stopped run did not report '$report'"; }
  "$python" - "$work/first.jsonl" "$stop" <<'PY' || fail "the stopped run's records do not end at step $stop"
import json, sys
records, stop = [json.loads(line) for line in open(sys.argv[1])], int(sys.argv[2])
steps = [r["step"] for r in records if "batch" in r]
assert steps and max(steps) == stop, f"steps logged up to {max(steps, default=None)}, expected {stop}"
assert all(r["step"] <= stop for r in records), f"a record beyond step {stop}: {records[-1]}"
PY
  [ -s "$work/ck/last.ckpt" ] || fail "no last.ckpt after the stopped run"
  ls "$work/ck" | grep -q '\.tmp' && fail "a temporary file was left in the checkpoint directory"
  fit --devices 2 --metrics-file "$work/resumed.jsonl" --ckpt-dir "$work/ck" --resume last "$@" >"$work/resumed.out" 2>&1 \
    || { cat "$work/resumed.out"; fail "resumed run failed"; }
  grep -q "resumed from $work/ck/last.ckpt" "$work/resumed.out" || { cat "$work/resumed.out"; fail "no resume report"; }
  same_after "$work/full.jsonl" "$work/resumed.jsonl" $((stop + 1))
}

case $case_name in
mid_epoch)
  # 512 images, 2 ranks x 32: 8 batches per epoch; step 11 = epoch 2, batch 3.
  stop_and_resume 11 "stopped at max_steps 11 (epoch 2, batch 3 of 8)" --ckpt-every-n-steps 5
  ;;
epoch_end)
  stop_and_resume 8 "8 optimizer step(s), 2 rank(s)"
  ;;
accumulate)
  # 4 steps per epoch; step 6 = epoch 2, batch 4.
  stop_and_resume 6 "stopped at max_steps 6 (epoch 2, batch 4 of 8)" --accumulate-grad-batches 2 --ckpt-every-n-steps 2
  ;;
world_size)
  fit --devices 2 --ckpt-dir "$work/ck" --max-steps 8 >"$work/first.out" 2>&1 || { cat "$work/first.out"; fail "2-rank run failed"; }
  fit --devices 1 --ckpt-dir "$work/ck" --resume last --metrics-file "$work/one.jsonl" >"$work/one.out" 2>&1 \
    || { cat "$work/one.out"; fail "resuming an epoch-end checkpoint on 1 rank failed"; }
  grep -q "written by 2 rank(s)" "$work/one.out" || { cat "$work/one.out"; fail "no resume report"; }
  "$python" -c "
import json, sys
epochs = [e for e in map(json.loads, open('$work/one.jsonl')) if 'batch' not in e]
assert [e['epoch'] for e in epochs] == [1, 2], epochs
assert all(e['world_size'] == 1 and e['train_samples'] == 512 for e in epochs), epochs
print('resumed on 1 rank: epochs', [e['epoch'] for e in epochs])
" || fail "wrong epochs after resuming on 1 rank"
  # Mid-epoch on another world size: the rest of epoch 0 (512 - 3 batches x 32 x 2 ranks = 320 samples) is
  # re-sharded onto 1 rank, so epoch 0 still counts every sample once; the epoch's sync_dist sums of the
  # 2 ranks carry over.
  fit --devices 2 --ckpt-dir "$work/ck2" --max-steps 3 >/dev/null 2>&1 || fail "2-rank run failed"
  cp -r "$work/ck2" "$work/ck3"
  fit --devices 1 --ckpt-dir "$work/ck2" --resume last --metrics-file "$work/reshard.jsonl" >"$work/reshard.out" 2>&1 \
    || { cat "$work/reshard.out"; fail "resuming a mid-epoch checkpoint of 2 ranks on 1 failed"; }
  grep -q "re-sharding the rest of the epoch" "$work/reshard.out" || { cat "$work/reshard.out"; fail "no re-shard report"; }
  "$python" -c "
import json
epochs = [e for e in map(json.loads, open('$work/reshard.jsonl')) if 'batch' not in e]
assert [e['epoch'] for e in epochs] == [0, 1, 2], epochs
assert all(e['train_samples'] == 512 for e in epochs), epochs
steps = [e['step'] for e in map(json.loads, open('$work/reshard.jsonl')) if 'batch' in e]
assert steps[0] == 4 and steps[9] == 13, steps  # 10 batches of the re-sharded rest, then 16 per epoch
" || fail "wrong epochs after re-sharding onto 1 rank"
  # A checkpoint written inside the re-sharded epoch resumes exactly on the same world size.
  fit --devices 1 --ckpt-dir "$work/ck3" --resume last --max-steps 7 >/dev/null 2>&1 || fail "re-sharded run to step 7 failed"
  cp "$work/ck3/last.ckpt" "$work/step7.ckpt"
  fit --devices 1 --ckpt-dir "$work/ck3" --resume last --metrics-file "$work/again.jsonl" >"$work/again.out" 2>&1 \
    || { cat "$work/again.out"; fail "resuming inside a re-sharded epoch failed"; }
  same_after "$work/reshard.jsonl" "$work/again.jsonl" 8
  # ... and on yet another world size (an elastic job that shrank, then grew): the rest of the rest is
  # dealt to 2 ranks, and epoch 0 still counts every sample once.
  fit --devices 2 --resume "$work/step7.ckpt" --metrics-file "$work/twice.jsonl" >"$work/twice.out" 2>&1 \
    || { cat "$work/twice.out"; fail "resuming a twice re-sharded epoch on 2 ranks failed"; }
  grep -q "written by 1 rank(s); re-sharding the rest of the epoch" "$work/twice.out" ||
    { cat "$work/twice.out"; fail "no re-shard report"; }
  "$python" -c "
import json
epochs = [e for e in map(json.loads, open('$work/twice.jsonl')) if 'batch' not in e]
assert [e['epoch'] for e in epochs] == [0, 1, 2], epochs
assert all(e['train_samples'] == 512 for e in epochs), epochs
" || fail "wrong epochs after re-sharding a re-sharded epoch onto 2 ranks"
  ;;
restart)
  # kill -9 of one rank after a chosen step (rank 1 and rank 0; rank 0 also inside a checkpoint write,
  # after the bytes and before the rename): --max-restarts restarts every rank, the restarted run resumes
  # from last.ckpt, and the job ends with exit 0 and every step and epoch record of the undisturbed run
  # (the last one written for each: steps after the checkpoint are trained, and logged, twice). last.ckpt
  # is never torn and no temporary file stays behind.
  fit --devices 2 --ckpt-dir "$work/ref" --ckpt-every-n-steps 2 --metrics-file "$work/ref.jsonl" >/dev/null 2>&1 \
    || fail "undisturbed run failed"
  for fault in 1:5 0:11 0:14:ckpt 1:21; do
    dir="$work/fault_$(echo "$fault" | tr : _)"
    LOCKSTEP_FAULT=$fault fit --devices 2 --ckpt-dir "$dir" --ckpt-every-n-steps 2 --max-restarts 2 \
      --metrics-file "$dir.jsonl" >"$dir.out" 2>&1 || { cat "$dir.out"; fail "fault $fault: the job failed"; }
    grep -q "restarting all 2 worker(s) (restart 1 of 2)" "$dir.out" || { cat "$dir.out"; fail "fault $fault: no restart"; }
    grep -q "restart 1: resuming from $dir/last.ckpt" "$dir.out" || { cat "$dir.out"; fail "fault $fault: no resume"; }
    same_after "$work/ref.jsonl" "$dir.jsonl" 1  # the last record of each step and epoch (see same_after)
    ls -A "$dir" | grep -q '^\.' && fail "fault $fault: temporary files left: $(ls -A "$dir")"
  done
  ;;
preempt)
  # A preemption notice to the launcher mid-run: SIGUSR1 (Slurm's --signal=USR1@90) is forwarded to the
  # ranks, which agree on a step, write last.ckpt and exit 75 (no restart, though --max-restarts allows
  # one); SIGTERM stops the job (143) after the same checkpoint. Either way `--resume last` then ends with
  # the undisturbed run's records.
  # The notice lands after step 6 (mid-epoch) and after step 8 (the last batch of epoch 0, before its
  # validation: the resumed run validates epoch 0 first and must report what the undisturbed run did).
  # The default cosine schedule gives every step its own rate.
  fit --devices 2 --ckpt-dir "$work/ref" --metrics-file "$work/ref.jsonl" >/dev/null 2>&1 \
    || fail "undisturbed run failed"
  for notice in usr1:75:6 term:143:6 usr1:75:8 term:143:8; do
    IFS=: read -r kind want at <<<"$notice"
    dir="$work/${kind}_$at"
    LOCKSTEP_FAULT=1:$at:$kind fit --devices 2 --ckpt-dir "$dir" --max-restarts 1 \
      --metrics-file "$dir.jsonl" >"$dir.out" 2>&1
    status=$?
    [ "$status" -eq "$want" ] || { cat "$dir.out"; fail "$kind: exit status $status, expected $want"; }
    grep -Eq "preempted by SIG(USR1|TERM) at step $at .*exiting with status 75" "$dir.out" \
      || { cat "$dir.out"; fail "$kind: no preemption report at step $at"; }
    grep -q "restarting all" "$dir.out" && { cat "$dir.out"; fail "$kind: restarted after a preemption notice"; }
    if [ "$kind" = usr1 ]; then  # the launcher calls it a preemption, not a failure
      grep -q "lockstep run: preempted: rank [01] exited with status 75 after the SIGUSR1 notice" "$dir.out" \
        || { cat "$dir.out"; fail "usr1: the launcher does not report a preemption"; }
      grep -q "job failed" "$dir.out" && { cat "$dir.out"; fail "usr1: the launcher calls the preemption a failure"; }
    fi
    step=$(grep -Eo "preempted by SIG[A-Z0-9]+ at step [0-9]+" "$dir.out" | grep -Eo "[0-9]+$")
    fit --devices 2 --ckpt-dir "$dir" --resume last --metrics-file "$dir.resumed.jsonl" \
      >"$dir.resumed.out" 2>&1 \
      || { cat "$dir.resumed.out"; fail "$kind: resuming failed"; }
    same_after "$work/ref.jsonl" "$dir.resumed.jsonl" $((step + 1))
  done
  ;;
bad_resume)
  expect_failure 2 "cannot open checkpoint '$work/missing.ckpt'" -- fit --devices 1 --resume "$work/missing.ckpt"
  expect_failure 2 "--resume 'last' needs --ckpt-dir" -- fit --devices 1 --resume last
  head -c 4096 /dev/urandom >"$work/garbage.ckpt"
  expect_failure 1 "checkpoint '$work/garbage.ckpt' does not end with lockstep's checksum trailer (4096 bytes): it is truncated" \
    -- fit --devices 1 --resume "$work/garbage.ckpt"
  fit --devices 1 --ckpt-dir "$work/ck" --max-steps 2 >/dev/null 2>&1 || fail "1-rank run failed"
  MODEL=cnn expect_failure 1 "holds a 'mlp' model, not 'cnn'" -- fit --devices 1 --resume "$work/ck/last.ckpt"
  expect_failure 1 "another optimizer's state" -- fit --devices 1 --optimizer sgd --resume "$work/ck/last.ckpt"
  expect_failure 1 "this model has" -- fit --devices 1 --synthetic-shape 1,16,16 --resume "$work/ck/last.ckpt"
  head -c 3000 "$work/ck/last.ckpt" >"$work/torn.ckpt"
  expect_failure 1 "checkpoint '$work/torn.ckpt' does not end with lockstep's checksum trailer (3000 bytes)" \
    -- fit --devices 1 --resume "$work/torn.ckpt"
  # One flipped bit in the middle of the file (LibTorch's zip reader checks no CRC: without lockstep's
  # checksum this loaded silently with other weights). The run must stop before writing anything.
  mkdir "$work/ck_flip"
  cp "$work/ck/last.ckpt" "$work/ck_flip/last.ckpt"
  "$python" - "$work/ck_flip/last.ckpt" <<'PY' || fail "cannot flip a byte"
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[len(data) // 2] ^= 0x01
open(path, "wb").write(data)
PY
  cp "$work/ck_flip/last.ckpt" "$work/flipped.ckpt"
  expect_failure 1 "checkpoint '$work/ck_flip/last.ckpt' is damaged: the crc32 of its" \
    -- fit --devices 1 --ckpt-dir "$work/ck_flip" --resume last --metrics-file "$work/flip.jsonl"
  grep -Fq "when it wrote it (the file was changed after lockstep wrote it: disk, copy or transfer error): resume from an older checkpoint (--resume 'PATH')" \
    "$work/err" || fail "the checksum error lacks the cause or the fix"
  [ "$(ls -A "$work/ck_flip")" = "last.ckpt" ] || fail "files written next to the damaged checkpoint: $(ls -A "$work/ck_flip")"
  cmp -s "$work/ck_flip/last.ckpt" "$work/flipped.ckpt" || fail "the damaged checkpoint was changed"
  [ ! -s "$work/flip.jsonl" ] || fail "metrics written although the checkpoint was damaged"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "resume_e2e[$case_name]: ok"
