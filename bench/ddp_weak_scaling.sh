#!/usr/bin/env bash
# DDP benchmarks, each against a baseline measured in the same run (issue "DDP engine"):
#   1. Weak scaling on W1 (seed MLP, batch 64/rank, Adam, 1 thread/rank, data in memory): 2-rank DDP
#      per-rank throughput / the bare LibTorch loop's throughput (no process group, no DDP).
#   2. The ResNet18-sized model (11.5M params): the same ratio, and the fraction of all-reduce time that
#      overlaps backward, from the DDP timeline (LOCKSTEP_TIMELINE).
#   3. Memory: peak RSS of a DDP rank vs the bare loop, and the reducer's bucket bytes vs gradient bytes.
#
#   bench/ddp_weak_scaling.sh [build-dir] [steps]      (defaults: build, 300)
set -euo pipefail
build=${1:-build}
steps=${2:-300}
bench=$build/bench/ddp_bench
lockstep=$build/lockstep
for f in "$bench" "$lockstep"; do
  [[ -x $f ]] || { echo "ddp_weak_scaling: $f not built (cmake --build $build)" >&2; exit 2; }
done
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -n 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run_pair() {  # model steps -> prints "bare_sps ddp_sps bare_rss ddp_rss grad bucket"
  local model=$1 n=$2
  OMP_NUM_THREADS=1 "$bench" --mode bare --model "$model" --steps "$n" >"$tmp/bare.txt"
  LOCKSTEP_TIMELINE=$tmp/timeline_$model.json "$lockstep" run --nproc-per-node 2 --standalone -- \
    "$bench" --mode ddp --model "$model" --steps "$n" >"$tmp/ddp.txt"
  local bare ddp0 ddp1
  bare=$(field samples_per_s <"$tmp/bare.txt")
  ddp0=$(grep 'rank=0' "$tmp/ddp.txt" | field samples_per_s)
  ddp1=$(grep 'rank=1' "$tmp/ddp.txt" | field samples_per_s)
  echo "$bare $(awk -v a="$ddp0" -v b="$ddp1" 'BEGIN { print (a + b) / 2 }') \
$(field peak_rss_kib <"$tmp/bare.txt") $(grep 'rank=0' "$tmp/ddp.txt" | field peak_rss_kib) \
$(grep 'rank=0' "$tmp/ddp.txt" | field grad_bytes) $(grep 'rank=0' "$tmp/ddp.txt" | field bucket_bytes)"
}

# Fraction of all-reduce time that lies inside backward spans (rank 0's timeline).
overlap() { python3 "$(dirname "$0")/timeline_overlap.py" "$1"; }

echo "DDP benchmarks, 2 local ranks x 1 thread, Gloo over loopback, $steps timed steps"
read -r bare ddp bare_rss ddp_rss grad bucket < <(run_pair mlp "$steps")
printf '  W1 (MLP, batch 64, Adam):  bare %9.0f samples/s   DDP %9.0f samples/s/rank   ratio %.3f\n' \
  "$bare" "$ddp" "$(awk -v a="$ddp" -v b="$bare" 'BEGIN { print a / b }')"
printf '      peak RSS bare %d KiB, DDP rank %d KiB; gradients %d B, buckets %d B (%.2fx)\n' \
  "$bare_rss" "$ddp_rss" "$grad" "$bucket" "$(awk -v a="$bucket" -v b="$grad" 'BEGIN { print a / b }')"
read -r bare ddp bare_rss ddp_rss grad bucket < <(run_pair wide $((steps / 10)))
printf '  wide (11.5M params, batch 32, SGD): bare %7.0f samples/s   DDP %7.0f samples/s/rank   ratio %.3f\n' \
  "$bare" "$ddp" "$(awk -v a="$ddp" -v b="$bare" 'BEGIN { print a / b }')"
printf '      all-reduce time overlapping backward (rank 0 timeline): %s\n' "$(overlap "$tmp/timeline_wide.rank0.json")"
printf '      peak RSS bare %d KiB, DDP rank %d KiB; gradients %d B, buckets %d B (%.2fx)\n' \
  "$bare_rss" "$ddp_rss" "$grad" "$bucket" "$(awk -v a="$bucket" -v b="$grad" 'BEGIN { print a / b }')"
