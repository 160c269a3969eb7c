#!/usr/bin/env bash
# W1: `lockstep fit` (seed MLP, batch 64/rank, 1 thread/rank, 2 ranks, Adam 1e-3 constant) against the
# ideal = (bare LibTorch loop's epoch time, 1 thread, data in memory) / 2, both measured in this run.
# Runs alternate (bare, then fit with each backend of BACKENDS, default "shm gloo", then the bare loop
# with lockstep's FusedAdam) ROUNDS times; figures are medians over all epochs of all rounds, and each
# round's own ratio is printed too. Target: ideal / epoch_s >= 0.9. The fused bare loop is not the
# baseline: it shows what part of lockstep fit's speed comes from its optimizer rather than from DDP.
#
#   bash bench/fit_w1.sh BUILD_DIR [EPOCHS=3] [ROUNDS=3]
#
# BUILD_DIR must hold lockstep and bench/bare_loop (BARE=path overrides the latter).
set -euo pipefail
build=${1:?usage: fit_w1.sh BUILD_DIR [EPOCHS] [ROUNDS]}
epochs=${2:-3}
rounds=${3:-3}
lockstep=$build/lockstep
bare=${BARE:-$build/bench/bare_loop}
backends=${BACKENDS:-shm gloo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

epoch_times() { grep -o '"epoch_s": *[0-9.e+-]*' "$1" | sed 's/.*: *//'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for r in $(seq 1 "$rounds"); do
  OMP_NUM_THREADS=1 "$bare" --epochs "$epochs" --threads 1 >"$tmp/bare.$r.jsonl"
  line="round $r: bare $(epoch_times "$tmp/bare.$r.jsonl" | tr '\n' ' ')"
  for b in $backends; do
    "$lockstep" fit --devices 2 --model mlp --threads 1 --batch-size 64 --optimizer adam --lr 1e-3 \
      --lr-schedule constant --max-epochs "$epochs" --backend "$b" --progress off \
      --metrics-file "$tmp/fit-$b.$r.jsonl" >/dev/null
    line="$line| fit $b $(epoch_times "$tmp/fit-$b.$r.jsonl" | tr '\n' ' ')"
  done
  OMP_NUM_THREADS=1 "$bare" --epochs "$epochs" --threads 1 --optimizer fused >"$tmp/fused.$r.jsonl"
  line="$line| bare fused $(epoch_times "$tmp/fused.$r.jsonl" | tr '\n' ' ')"
  round_ratio=$(awk -v b="$(epoch_times "$tmp/bare.$r.jsonl" | median)" \
    -v f="$(epoch_times "$tmp/fit-${backends%% *}.$r.jsonl" 2>/dev/null | median)" 'BEGIN { if (f > 0) printf "%.3f", b / 2 / f }')
  echo "$line (epoch_s); round ideal/epoch_s (${backends%% *}) = $round_ratio"
done

bare_med=$(cat "$tmp"/bare.*.jsonl | epoch_times /dev/stdin | median)
ideal=$(awk -v b="$bare_med" 'BEGIN { print b / 2 }')
printf '\nW1 (%d rounds x %d epochs, medians of epoch_s)\n' "$rounds" "$epochs"
printf '  bare loop, 1 process, 1 thread:  %.3f s/epoch   ideal for 2 ranks = %.3f s\n' "$bare_med" "$ideal"
fused_med=$(cat "$tmp"/fused.*.jsonl | epoch_times /dev/stdin | median)
printf '  bare loop with FusedAdam (not the baseline): %.3f s/epoch\n' "$fused_med"
for b in $backends; do
  fit_med=$(cat "$tmp"/fit-$b.*.jsonl | epoch_times /dev/stdin | median)
  printf '  lockstep fit, 2 ranks, --backend %-4s: %.3f s/epoch   ideal/epoch_s = %.3f (target >= 0.9)\n' \
    "$b" "$fit_med" "$(awk -v i="$ideal" -v f="$fit_med" 'BEGIN { print i / f }')"
  printf '    against the FusedAdam bare loop / 2: %.3f\n' "$(awk -v i="$fused_med" -v f="$fit_med" 'BEGIN { print i / 2 / f }')"
done
