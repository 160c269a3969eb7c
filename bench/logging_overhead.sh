#!/usr/bin/env bash
# The cost of watching a run (issue 26): W1's `lockstep fit` (MLP, 2 ranks, batch 64/rank, 1 thread/rank,
# Adam 1e-3 constant) with everything on at the defaults — all three loggers (tensorboard, csv, jsonl: step
# records every 50 steps, epoch records) and the step breakdown every 10th batch — against the same run with
# no logger and the breakdown off. Runs alternate, ROUNDS times each; figures are medians over all epochs of
# all rounds (epoch_s: the training part, slowest rank), with each round's own ratio. Target: <= 1% slower.
#
#   bash bench/logging_overhead.sh BUILD_DIR [EPOCHS=3] [ROUNDS=5]
set -euo pipefail
build=${1:?usage: logging_overhead.sh BUILD_DIR [EPOCHS] [ROUNDS]}
epochs=${2:-3}
rounds=${3:-5}
lockstep=$build/lockstep
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

epoch_times() { grep -o '"epoch_s": *[0-9.e+-]*' "$1" | sed 's/.*: *//'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
w1=(fit --devices 2 --model mlp --threads 1 --batch-size 64 --optimizer adam --lr 1e-3 --lr-schedule constant
    --max-epochs "$epochs" --progress off)

for r in $(seq 1 "$rounds"); do
  "$lockstep" "${w1[@]}" --breakdown-every-n-batches 0 --metrics-file "$tmp/off.$r.jsonl" >/dev/null
  "$lockstep" "${w1[@]}" --logger tensorboard,csv,jsonl --default-root-dir "$tmp/logs" \
    --metrics-file "$tmp/on.$r.jsonl" >/dev/null
  echo "round $r: off $(epoch_times "$tmp/off.$r.jsonl" | tr '\n' ' ')| on $(epoch_times "$tmp/on.$r.jsonl" | tr '\n' ' ')" \
    "(epoch_s); on/off = $(awk -v a="$(epoch_times "$tmp/on.$r.jsonl" | median)" \
      -v b="$(epoch_times "$tmp/off.$r.jsonl" | median)" 'BEGIN { printf "%.3f", a / b }')"
done
off=$(cat "$tmp"/off.*.jsonl | epoch_times /dev/stdin | median)
on=$(cat "$tmp"/on.*.jsonl | epoch_times /dev/stdin | median)
printf '\nlogging overhead on W1 (%d rounds x %d epochs, medians of epoch_s)\n' "$rounds" "$epochs"
printf '  no logger, breakdown off:                     %.4f s/epoch\n' "$off"
printf '  tensorboard,csv,jsonl + breakdown every 10th:  %.4f s/epoch\n' "$on"
printf '  overhead: %+.2f%% (target <= 1%%)\n' "$(awk -v a="$on" -v b="$off" 'BEGIN { print (a / b - 1) * 100 }')"
printf '  event file, metrics.csv, metrics.jsonl of one run: %s\n' \
  "$(ls -1 "$tmp"/logs/lightning_logs/version_0/ | tr '\n' ' ')"
