#!/usr/bin/env bash
# What a lost rank costs: in-place recovery (`lockstep fit --elastic`) against the restart path
# (`--max-restarts 1` from `last.ckpt`), both in one run, 3 ranks on this host, kill -9 of rank 1 after a
# given step. For each: the steps trained again, the seconds from the kill to the first step beyond the
# last one before it, the seconds from the loss being seen to training again (in place: the run's own
# `membership_change_s`), and the final val_acc.
#
#   bench/elastic_recovery.sh [path/to/lockstep] [w1|wide|all]      (defaults: build/lockstep, all)
#
# w1:   the seed MLP on Fashion-MNIST, 2 epochs (313 steps each on 3 ranks), checkpoint every 100 steps,
#       kill after step 450 (the restart path trains steps 401..450 again).
# wide: `--mlp-hidden 4096,4096,4096` (87M parameters, a 1 GB last.ckpt with Adam's state), 12 steps,
#       checkpoint every 5, kill after step 8.
set -u
bin=${1:-build/lockstep}
which=${2:-all}
[[ -x $bin ]] || { echo "elastic_recovery: '$bin' is not the lockstep binary" >&2; exit 2; }
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

. "$(dirname "$0")/elastic_kill_lib.sh"

# run_case LABEL MODE KILL_AT CKPT_EVERY FIT_ARGS...
run_case() {
  local label=$1 mode=$2 kill_at=$3 ckpt_every=$4
  shift 4
  local dir=$work/$label-$mode
  mkdir -p "$dir"
  local extra=(--elastic)
  [[ $mode == restart ]] && extra=(--max-restarts 1 --ckpt-dir "$dir/ck" --ckpt-every-n-steps "$ckpt_every")
  "$bin" fit --devices 3 "$@" "${extra[@]}" --log-every-n-steps 1 --metrics-file "$dir/m.jsonl" >"$dir/log" 2>&1 &
  local fit=$!
  until grep -q "\"step\":$kill_at," "$dir/m.jsonl" 2>/dev/null; do sleep 0.01; done
  local pids=($(pgrep -P "$fit" | sort -n))
  kill_and_time "$dir/m.jsonl" kill -9 "${pids[1]}"
  wait "$fit"
  local status=$?
  local redone seen val
  redone=$(steps_redone "$dir/m.jsonl")
  seen=$(grep -o '"membership_change_s":[0-9.]*' "$dir/m.jsonl" | cut -d: -f2)
  val=$(final_val_acc "$dir/m.jsonl")
  printf "%-5s %-8s exit %d  killed after step %4d  steps trained again %4d  kill -> next new step %6.2f s  loss seen -> training again %5s s  final val_acc %s\n" \
    "$label" "$mode" "$status" "$kill_before" "$redone" "$kill_seconds" \
    "${seen:--}" "$val"
}

w1=(--max-epochs 2)
wide=(--mlp-hidden 4096,4096,4096 --max-epochs 1 --limit-train-batches 12)
if [[ $which == w1 || $which == all ]]; then
  run_case w1 in-place 450 100 "${w1[@]}"
  run_case w1 restart 450 100 "${w1[@]}"
fi
if [[ $which == wide || $which == all ]]; then
  run_case wide in-place 8 5 "${wide[@]}"
  run_case wide restart 8 5 "${wide[@]}"
fi
