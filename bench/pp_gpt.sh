#!/usr/bin/env bash
# Pipeline parallelism's bubble, speed and memory (docs/benchmarks.md, "Pipeline parallelism"): the GPT of
# bench/pp_gpt_bench.cpp (3.2M parameters, context 128, 16 sequences a step, 10 timed steps after 2), one
# process (P = 1, M = 1: what each ddp rank keeps) and 2 stages with GPipe and 1F1B at M = 1, 2, 4, 8. For
# each: tokens/s (median of ROUNDS rounds) and its ratio to one process, each stage's waited share of the
# step against (P - 1)/(M + P - 1), activations held, the model state each rank keeps and its peak RSS.
# With PYTHON (a Python whose torch has torch.distributed.pipelining), the same runs (M >= 2) under
# PyTorch's ScheduleGPipe/Schedule1F1B on the same cut (bench/pp_gpt_torch.py), in the same rounds, and
# lockstep's tokens/s over PyTorch's.
#
#   bash bench/pp_gpt.sh BUILD_DIR [ROUNDS=3] [PYTHON]
set -euo pipefail
build=${1:?usage: pp_gpt.sh BUILD_DIR [ROUNDS] [PYTHON]}
rounds=${2:-3}
python=${3:-}
lockstep=$build/lockstep
bench=$build/bench/pp_gpt_bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { grep -o "$2=[0-9.]*" "$1" | head -1 | cut -d= -f2; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ours() {  # NAME RANKS ARGS...
  local name=$1 ranks=$2
  shift 2
  "$lockstep" run --nproc-per-node "$ranks" --standalone -- "$bench" "$@" | sed 's/^\[rank [0-9]*\] //' >"$tmp/$name"
}
if [ -n "$python" ] && ! "$python" -c "import torch.distributed.pipelining" 2>/dev/null; then
  echo "pp_gpt.sh: $python has no torch.distributed.pipelining (torch >= 2.4): PyTorch is not run" >&2
  python=
fi
runs="one"
for round in $(seq "$rounds"); do
  ours "one-$round" 1 --schedule gpipe --micro-batches 1
  for schedule in gpipe 1f1b; do
    for m in 1 2 4 8; do
      ours "$schedule-m$m-$round" 2 --schedule "$schedule" --micro-batches "$m"
      [ "$round" = 1 ] && runs="$runs $schedule-m$m"
      if [ -n "$python" ] && [ "$m" -ge 2 ]; then  # the cut lockstep balanced: blocks before its stage 1
        blocks=$(($(field <(grep '^rank=0 ' "$tmp/$schedule-m$m-$round") cut) - 1))
        "$python" "$(dirname "$0")/pp_gpt_torch.py" --schedule "$schedule" --micro-batches "$m" \
          --first-blocks "$blocks" >"$tmp/torch-$schedule-m$m-$round"
      fi
    done
  done
done
speed() { for round in $(seq "$rounds"); do field <(grep "^$2" "$tmp/$1-$round") tokens_per_s; done | median; }
base=$(speed one rank=0)
echo "tokens/s, medians of $rounds rounds; waited = share of the step a stage waited (round 1), model = (P-1)/(M+P-1);"
echo "state = parameters kept, gradients and Adam's moments (MiB), rss = peak resident memory (MiB), round 1:"
for run in $runs; do
  value=$(speed "$run" rank=0)
  line=$(awk -v n="$run" -v v="$value" -v a="$base" 'BEGIN { printf "  %-9s %8.1f tokens/s  %.3fx one process", n, v, v / a }')
  if [ -f "$tmp/torch-$run-1" ]; then
    theirs=$(speed "torch-$run" torch)
    line="$line$(awk -v v="$value" -v t="$theirs" 'BEGIN { printf "  torch %8.1f tokens/s (lockstep %.3fx)", t, v / t }')"
  fi
  for stage in 0 1; do
    row=$(grep "^rank=$stage " "$tmp/$run-1" || true)
    [ -n "$row" ] || continue
    line="$line  stage $stage: waited $(field <(echo "$row") waited) (model $(field <(echo "$row") bubble_model)), held $(field <(echo "$row") peak_micro_batches), state $(field <(echo "$row") state_mb), rss $(field <(echo "$row") peak_rss_mb)"
  done
  echo "$line"
done
