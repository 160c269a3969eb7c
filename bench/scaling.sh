#!/usr/bin/env bash
# Strong scaling of `lockstep fit`: the same workload (the whole training split each epoch, batch 64 per
# rank, 1 intra-op thread per rank) at 1 and 2 ranks. Time per epoch is the median epoch_s (training part,
# slowest rank) scaled to the whole training split: with --limit-train-batches each rank trains only that
# many batches, so the measured epoch_s is multiplied by (training-split size / train_samples of the
# epoch). speedup = t(1) / t(n); efficiency = speedup / n.
#
#   bash bench/scaling.sh BUILD_DIR [MODEL=mlp] [EPOCHS=3] [extra lockstep fit flags...]
#   e.g. bash bench/scaling.sh build cnn 2 --limit-train-batches 0.25
#
# THREADS (default 1) sets --threads per rank; RANKS (default "1 2") the rank counts.
set -euo pipefail
build=${1:?usage: scaling.sh BUILD_DIR [MODEL] [EPOCHS] [fit flags...]}
model=${2:-mlp}
epochs=${3:-3}
shift $(($# < 3 ? $# : 3))
threads=${THREADS:-1}
lockstep=$build/lockstep
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "lockstep fit --model $model, $epochs epoch(s), batch 64/rank, $threads thread(s)/rank $*"
echo "| ranks | time/epoch | speedup | efficiency |"
echo "|---|---|---|---|"
t1=
for n in ${RANKS:-1 2}; do
  "$lockstep" fit --devices "$n" --model "$model" --threads "$threads" --max-epochs "$epochs" --progress off \
    --metrics-file "$tmp/fit$n.jsonl" "$@" >"$tmp/out$n.txt"
  full=$(grep -o '([0-9]* train' "$tmp/out$n.txt" | head -1 | tr -dc 0-9)
  t=$(grep -o '"epoch_s": *[0-9.e+-]*' "$tmp/fit$n.jsonl" | sed 's/.*: *//' | median)
  trained=$(grep -o '"train_samples": *[0-9]*' "$tmp/fit$n.jsonl" | sed 's/.*: *//' | median)
  t=$(awk -v t="$t" -v f="$full" -v s="$trained" 'BEGIN { print t * f / s }')
  t1=${t1:-$t}
  awk -v n="$n" -v t="$t" -v t1="$t1" 'BEGIN { s = t1 / t; printf "| %d | %.2f s | %.2fx | %.0f%% |\n", n, t, s, 100 * s / n }'
done
