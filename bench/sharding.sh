#!/usr/bin/env bash
# Sharded strategies against ddp, measured in one run (docs/benchmarks.md, "Sharded data parallel"):
#   memory: 4 ranks, --model mlp --mlp-hidden 4096,4096,4096 (36.8M parameters), Adam: model_state_mb (a rank's
#           parameters + gradient buckets + optimizer state) and peak_rss_mb, the largest over the ranks;
#   speed:  2 ranks on shm, W1 (the seeds' MLP, batch 64) and the wide MLP: epoch_s of the second epoch,
#           strategies alternating ROUNDS times; medians, and each strategy's ratio to ddp.
#
#   bash bench/sharding.sh BUILD_DIR [ROUNDS=3] [STRATEGIES="ddp zero1 zero2 fsdp"]
#   PRECISION=bf16-mixed bash bench/sharding.sh ...   (every run in that precision; default 32)
set -euo pipefail
build=${1:?usage: sharding.sh BUILD_DIR [ROUNDS] [STRATEGIES]}
rounds=${2:-3}
strategies=${3:-ddp zero1 zero2 fsdp}
lockstep=$build/lockstep
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | tail -1 | cut -d: -f2; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
precision=${PRECISION:-32}
fit() {
  "$lockstep" fit --threads 1 --progress off --limit-val-batches 1 --lr-schedule constant --precision "$precision" \
    "$@" >/dev/null
}

echo "memory: 4 ranks, mlp 4096,4096,4096, Adam, precision $precision (MiB, the largest rank)"
for s in $strategies; do
  fit --devices 4 --model mlp --mlp-hidden 4096,4096,4096 --max-epochs 1 --limit-train-batches 5 --strategy "$s" \
    --metrics-file "$tmp/mem-$s.jsonl"
done
ddp_state=$(field "$tmp/mem-ddp.jsonl" model_state_mb)
ddp_rss=$(field "$tmp/mem-ddp.jsonl" peak_rss_mb)
for s in $strategies; do
  st=$(field "$tmp/mem-$s.jsonl" model_state_mb)
  rss=$(field "$tmp/mem-$s.jsonl" peak_rss_mb)
  awk -v s="$s" -v st="$st" -v rss="$rss" -v d="$ddp_state" -v dr="$ddp_rss" \
    'BEGIN { printf "  %-6s model state %7.1f MiB (%.3fx ddp)   peak RSS %7.1f MiB (%.3fx ddp)\n", s, st, st / d, rss, rss / dr }'
done

for model in w1 wide; do
  args=(--model mlp --limit-train-batches 600)
  [ "$model" = wide ] && args=(--model mlp --mlp-hidden 4096,4096,4096 --limit-train-batches 8)
  for r in $(seq 1 "$rounds"); do
    for s in $strategies; do
      fit --devices 2 --backend shm --max-epochs 2 "${args[@]}" --strategy "$s" --metrics-file "$tmp/$model-$s-$r.jsonl"
    done
  done
  echo "speed: 2 ranks on shm, $model (epoch_s of epoch 2, median of $rounds rounds)"
  ddp_med=$(for r in $(seq 1 "$rounds"); do field "$tmp/$model-ddp-$r.jsonl" epoch_s; done | median)
  for s in $strategies; do
    med=$(for r in $(seq 1 "$rounds"); do field "$tmp/$model-$s-$r.jsonl" epoch_s; done | median)
    awk -v s="$s" -v m="$med" -v d="$ddp_med" 'BEGIN { printf "  %-6s %.3f s/epoch   throughput %.3fx ddp\n", s, m, d / m }'
  done
done
