#!/usr/bin/env bash
# `lockstep fit --model gpt --data text` (the whole Trainer: loader, sampler, logging, DDP) against PyTorch's
# DDP on the same GPT (GptOptions::tiny(): 2 layers, 2 heads, width 64, context 64, vocabulary 256),
# 2 ranks x batch 32, one thread each, Adam, float32 (docs/benchmarks.md, "GPT under lockstep fit"); then
# the same global batch with the model split over the 2 ranks, `lockstep fit --tensor-parallel 2` (batch
# 64 on the one data-parallel group) against PyTorch's tensor parallelism (gpt_peer.py --mode tp).
# ROUNDS rounds of the four runs alternating; tokens/s of the whole job, medians. lockstep's figure is its
# epoch's samples/s x 64 (the training part of the epoch, data loading included, slowest rank); the peer
# (bench/peer/gpt_peer.py --size tiny) draws its tokens in the loop and times STEPS steps after 2 of warmup.
#
#   bash bench/gpt_fit.sh BUILD_DIR [ROUNDS=3] [PYTHON=python3 with torch 2.x] [STEPS=200]
set -euo pipefail
build=${1:?usage: gpt_fit.sh BUILD_DIR [ROUNDS] [PYTHON] [STEPS]}
rounds=${2:-3}
python=${3:-python3}
steps=${4:-200}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# fit NAME BATCH [FLAG...]: one lockstep fit run's tokens/s into $tmp/NAME-$round.
fit() {
  local name=$1 batch=$2
  shift 2
  "$build/lockstep" fit --model gpt --data text --devices 2 --threads 1 --batch-size "$batch" --max-epochs 1 \
    --limit-train-batches "$steps" --limit-val-batches 1 --progress off --metrics-file "$tmp/m-$name-$round.jsonl" "$@" >/dev/null
  "$python" -c 'import json, sys; print(round(json.loads(open(sys.argv[1]).readline())["samples_per_s"] * 64))' \
    "$tmp/m-$name-$round.jsonl" >"$tmp/$name-$round"
}
# peer NAME MODE BATCH: one gpt_peer.py run's tokens/s into $tmp/NAME-$round.
peer() {
  "$python" "$here/peer/gpt_peer.py" --mode "$2" --size tiny --batch "$3" --steps "$steps" |
    grep -o 'tokens_per_s=[0-9.]*' | cut -d= -f2 >"$tmp/$1-$round"
}
for round in $(seq "$rounds"); do
  fit fit 32
  peer py ddp 32
  fit fittp 64 --tensor-parallel 2
  peer pytp tp 64
  echo "round $round: lockstep fit $(cat "$tmp/fit-$round"), PyTorch DDP $(cat "$tmp/py-$round"), lockstep fit" \
    "--tensor-parallel 2 $(cat "$tmp/fittp-$round"), PyTorch tensor parallel $(cat "$tmp/pytp-$round") tokens/s"
done
fit=$(cat "$tmp"/fit-* | median) py=$(cat "$tmp"/py-* | median)
fittp=$(cat "$tmp"/fittp-* | median) pytp=$(cat "$tmp"/pytp-* | median)
awk -v a="$fit" -v b="$py" -v c="$fittp" -v d="$pytp" -v r="$rounds" 'BEGIN {
  printf "tokens/s, medians of %d rounds (2 ranks, 64 x 64 tokens a step): lockstep fit %.0f, PyTorch DDP %.0f: %.3fx\n", r, a, b, a / b
  printf "tensor parallel, T = 2: lockstep fit %.0f, PyTorch %.0f: %.3fx; against lockstep ddp %.3fx, against PyTorch DDP %.3fx\n", c, d, c / d, c / a, c / b }'
