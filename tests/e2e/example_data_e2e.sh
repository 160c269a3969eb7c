#!/bin/bash
# A "bring your own data" example on real data from a Debian package (issue 23), as its user would run it:
#   1. 1 rank x BATCH and 2 ranks x BATCH/2 train the same weights (final.safetensors, to float tolerance);
#   2. 2 ranks stopped at step STOP (mid-epoch, with a checkpoint) and resumed end bit-identical to (1)'s
#      uninterrupted 2-rank run;
#   3. the 2-rank run beats its trivial baseline: the example prints "quality: NAME VALUE baseline BASE".
# Usage: example_data_e2e.sh PYTHON EXAMPLE BATCH STOP [EXAMPLE FLAGS...] (the flags go to every run).
# STOP 0 leaves out (2). With EXAMPLE_LAUNCHER=path/to/lockstep, N ranks are started by
# `lockstep run --nproc-per-node N` (an Accelerate-style program) instead of the example's --devices N.
set -u
python=$1 example=$2 batch=$3 stop=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

run() {
  local name=$1 devices=$2
  shift 2
  local command=("$example" --devices "$devices")
  [ -n "${EXAMPLE_LAUNCHER:-}" ] && command=("$EXAMPLE_LAUNCHER" run --nproc-per-node "$devices" --standalone -- "$example")
  echo "== $name: ${command[*]} $*"
  "${command[@]}" "$@" >"$work/$name.out" 2>&1
  local status=$?
  cat "$work/$name.out"
  [ "$status" -eq 0 ] || fail "$name exited with status $status"
}

run one 1 --batch-size "$batch" --ckpt-dir "$work/one" "$@"
run two 2 --batch-size $((batch / 2)) --ckpt-dir "$work/two" "$@"
"$python" "$here/compare_safetensors.py" --close "$work/one/final.safetensors" "$work/two/final.safetensors" ||
  fail "2 ranks x $((batch / 2)) trained other weights than 1 rank x $batch"

if [ "$stop" -gt 0 ]; then
run stop 2 --batch-size $((batch / 2)) --ckpt-dir "$work/stop" --max-steps "$stop" "$@"
grep -q "stopped at max_steps $stop (epoch [0-9]*, batch [1-9]" "$work/stop.out" ||
  fail "the run did not stop mid-epoch at step $stop"
run resume 2 --batch-size $((batch / 2)) --ckpt-dir "$work/stop" --resume "$work/stop/last.ckpt" "$@"
grep -q "resumed from $work/stop/last.ckpt" "$work/resume.out" || fail "the run did not say it resumed"
"$python" "$here/compare_safetensors.py" --exact "$work/two/final.safetensors" "$work/stop/final.safetensors" ||
  fail "stopped and resumed, the weights differ from the uninterrupted run's"
fi

line=$(grep -o "quality: [a-z_]* [0-9.]* baseline [0-9.]*" "$work/two.out") || fail "no quality line"
read -r _ name value _ base <<<"$line"
"$python" -c "import sys; sys.exit(0 if float('$value') < float('$base') else 1)" ||
  fail "$name $value does not beat the baseline $base"
echo "ok: exact across world sizes$([ "$stop" -gt 0 ] && echo ", resume bit-identical"), $name $value beats the baseline $base"
