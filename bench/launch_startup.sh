#!/usr/bin/env bash
# Start-up cost of `lockstep run`: time from invoking the launcher until all workers run, for 2 ranks,
# against a bare baseline (the shell starting the same two workers itself), median of RUNS runs.
#
#   bench/launch_startup.sh [path/to/lockstep] [runs]     (defaults: build/lockstep, 20)
#
# Each worker is `sh -c 'date +%s%N'`: it prints the time it got to run. One sample is the latest
# worker timestamp minus a timestamp taken just before the launch. Goal: launcher - baseline < 0.2 s.
set -euo pipefail

bin=${1:-build/lockstep}
runs=${2:-20}
goal_ms=200

if [[ ! -x $bin ]]; then
  echo "launch_startup: '$bin' is not an executable lockstep binary (pass its path as \$1)" >&2
  exit 2
fi

# Median of the numbers on stdin.
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Latest worker timestamp (ns) among the lines on stdin (with or without a "[rank N] " prefix).
# (bash arithmetic: awk's doubles cannot hold nanosecond timestamps exactly)
latest() {
  local line t max=0
  while read -r line; do
    t=${line##* }
    ((t > max)) && max=$t
  done
  echo "$max"
}

launcher_sample() {
  local t0 out
  t0=$(date +%s%N)
  out=$("$bin" run --nproc-per-node 2 --standalone -- sh -c 'date +%s%N')
  echo $(( $(latest <<<"$out") - t0 ))
}

baseline_sample() {
  local t0 out
  t0=$(date +%s%N)
  out=$( { sh -c 'date +%s%N' & sh -c 'date +%s%N' & wait; } )
  echo $(( $(latest <<<"$out") - t0 ))
}

# One untimed run of each first, to warm the page cache.
launcher_sample >/dev/null
baseline_sample >/dev/null

launcher_ns=(); baseline_ns=()
for ((i = 0; i < runs; i++)); do
  launcher_ns+=("$(launcher_sample)")
  baseline_ns+=("$(baseline_sample)")
done

launcher_med=$(printf '%s\n' "${launcher_ns[@]}" | median)
baseline_med=$(printf '%s\n' "${baseline_ns[@]}" | median)

awk -v l="$launcher_med" -v b="$baseline_med" -v runs="$runs" -v goal="$goal_ms" 'BEGIN {
  lm = l / 1e6; bm = b / 1e6; d = lm - bm
  printf "launch start-up, 2 ranks, median of %d runs\n", runs
  printf "  lockstep run --standalone : %8.2f ms\n", lm
  printf "  bare shell baseline       : %8.2f ms\n", bm
  printf "  launcher overhead         : %8.2f ms  (ratio %.2fx)\n", d, (bm > 0 ? lm / bm : 0)
  printf "  goal: overhead < %d ms -> %s\n", goal, (d < goal ? "met" : "NOT met")
  exit (d < goal ? 0 : 1)
}'
