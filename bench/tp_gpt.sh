#!/usr/bin/env bash
# GPT training on 2 ranks, lockstep and PyTorch, ddp and tensor parallel (T = 2), in one run
# (docs/benchmarks.md, "Tensor parallelism"):
#   speed:  --size bench (3.2M parameters, context 128, batch 4 a rank), ROUNDS rounds of the four runs
#           alternating; tokens/s of the whole job, medians, and ratios against lockstep's ddp and PyTorch's DDP;
#   memory: --size small (GPT-2 small, vocabulary padded to 50304), 2 steps of one 64-token sequence: model_state_mb and peak_rss_mb
#           of rank 0, ddp and T = 2.
#
#   bash bench/tp_gpt.sh BUILD_DIR [ROUNDS=3] [PYTHON=python3 with torch 2.x]
set -euo pipefail
build=${1:?usage: tp_gpt.sh BUILD_DIR [ROUNDS] [PYTHON]}
rounds=${2:-3}
python=${3:-python3}
here=$(cd "$(dirname "$0")" && pwd)
lockstep=$build/lockstep
bench=$build/bench/tp_gpt_bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { grep -o "$2=[0-9.]*" "$1" | head -1 | cut -d= -f2; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ours() { "$lockstep" run --nproc-per-node 2 --standalone -- "$bench" "$@" | sed 's/^\[rank [0-9]*\] //' | grep '^rank=0 '; }

for round in $(seq "$rounds"); do
  ours --mode ddp --size bench --steps 20 >"$tmp/ddp-$round"
  ours --mode tp --tensor-parallel 2 --size bench --steps 20 >"$tmp/tp-$round"
  "$python" "$here/peer/gpt_peer.py" --mode ddp --size bench --steps 20 >"$tmp/pyddp-$round"
  "$python" "$here/peer/gpt_peer.py" --mode tp --size bench --steps 20 >"$tmp/pytp-$round"
  for run in ddp tp pyddp pytp; do echo "round $round $run: $(cat "$tmp/$run-$round")"; done
done
speed() { for round in $(seq "$rounds"); do field "$tmp/$1-$round" tokens_per_s; done | median; }
ddp=$(speed ddp) tp=$(speed tp) pyddp=$(speed pyddp) pytp=$(speed pytp)
echo "tokens/s, medians of $rounds rounds (2 ranks, --size bench):"
for run in ddp tp pyddp pytp; do
  value=$(speed "$run")
  awk -v n="$run" -v v="$value" -v a="$ddp" -v b="$pyddp" \
    'BEGIN { printf "  %-6s %9.1f  %.3fx lockstep ddp  %.3fx PyTorch DDP\n", n, v, v / a, v / b }'
done

echo "memory: GPT-2 small, 2 steps, rank 0 (MiB)"
ours --mode ddp --size small --batch 1 --length 64 --steps 2 --warmup 0 >"$tmp/mem-ddp"
ours --mode tp --tensor-parallel 2 --size small --batch 1 --length 64 --steps 2 --warmup 0 >"$tmp/mem-tp"
for run in ddp tp; do
  echo "  $run: params $(field "$tmp/mem-$run" params) model_state_mb $(field "$tmp/mem-$run" model_state_mb)" \
    "peak_rss_mb $(field "$tmp/mem-$run" peak_rss_mb)"
done
awk -v a="$(field "$tmp/mem-tp" model_state_mb)" -v b="$(field "$tmp/mem-ddp" model_state_mb)" \
  -v c="$(field "$tmp/mem-tp" peak_rss_mb)" -v d="$(field "$tmp/mem-ddp" peak_rss_mb)" \
  'BEGIN { printf "  T = 2 against ddp: model state %.3fx, peak RSS %.3fx\n", a / b, c / d }'
