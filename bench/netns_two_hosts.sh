#!/usr/bin/env bash
# DDP across two emulated hosts on a rate-limited link (issue 8): 2 hosts x 1 rank, each host a network
# namespace (scripts/netns-hosts.sh), the link between them limited to RATE each way with tbf. One rank
# per host trains ResNet18 (CIFAR form, 11.2M parameters, 44.7 MB of float gradients) on 3x32x32 inputs,
# batch 32, SGD, 1 thread, with Gloo between the hosts. Three figures, measured in the same run:
#   compute    the bare LibTorch loop, no process group (both hosts at once, as they share this machine's cores)
#   all-reduce DDP's buckets all-reduced over the link with no compute (ddp_bench --mode allreduce)
#   step       the DDP step (compute with the all-reduce overlapping backward)
# and the share of the all-reduce hidden behind backward: (compute + all-reduce - step) / all-reduce,
# with rank 0's timeline (LOCKSTEP_TIMELINE) as a cross-check: the fraction of all-reduce time inside
# backward spans.
# The two hosts share this machine's cores, so the all-reduce's own CPU work (Gloo's threads, the kernel's
# TCP stack for both ends of the link) competes with compute. The script measures that work (the
# machine's busy CPU time per step while the all-reduce runs alone) and prints the best share the
# step-time measure could show on this machine: the step needs at least
# (compute's CPU + all-reduce's CPU) / cores, and never less than compute alone.
# Every program uses lockstep-fit's allocator settings (ddp_bench --malloc heap; MALLOC=glibc keeps
# glibc's defaults) and, like lockstep fit, gradients as views into the buckets (BUCKET_VIEW=off copies
# them in and out).
#
#   bash bench/netns_two_hosts.sh [build-dir] [steps] [rate] [bucket-cap-mb|auto]   (defaults: build, 20, 1gbit, auto)
# Needs root (CAP_NET_ADMIN).
set -euo pipefail
build=${1:-build}
steps=${2:-20}
rate=${3:-1gbit}
bucket_mb=${4:-auto}
here=$(cd "$(dirname "$0")" && pwd)
bench=$(realpath "$build/bench/ddp_bench")
lockstep=$(realpath "$build/lockstep")
hosts="$here/../scripts/netns-hosts.sh"
export LOCKSTEP_NETNS=lsbench
tmp=$(mktemp -d)
trap '"$hosts" stop >/dev/null 2>&1; [[ -n ${LOCKSTEP_BENCH_KEEP:-} ]] && cp -r "$tmp" "$LOCKSTEP_BENCH_KEEP"; rm -rf "$tmp"' EXIT
"$hosts" start --rate "$rate"

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -n 1; }
on_host() {
  local n=$1
  shift
  ip netns exec "${LOCKSTEP_NETNS}$n" "$@"
}
flags=(--model resnet18 --steps "$steps" --warmup 3 --bucket-cap-mb "$bucket_mb" --backend gloo
  --malloc "${MALLOC:-heap}" --bucket-view "${BUCKET_VIEW:-on}")

# both MODE: one rank per host, the two at once; rank 0's output in $tmp/MODE.0, rank 1's in $tmp/MODE.1.
both() {
  local mode=$1 n pids=()
  for n in 0 1; do
    if [[ $mode == bare ]]; then
      on_host "$n" env OMP_NUM_THREADS=1 "$bench" --mode bare "${flags[@]}" >"$tmp/$mode.$n" &
    else
      on_host "$n" env OMP_NUM_THREADS=1 LOCKSTEP_TIMELINE="$tmp/timeline_$mode.json" "$lockstep" run --nnodes 2 --node-rank "$n" \
        --master-addr 10.231.0.1 --master-port 29500 --rdzv-id "bench-$mode" -- \
        "$bench" --mode "$mode" "${flags[@]}" >"$tmp/$mode.$n" &
    fi
    pids+=($!)
  done
  wait "${pids[0]}" && wait "${pids[1]}" || { cat "$tmp/$mode".*; echo "netns_two_hosts: the $mode run failed" >&2; exit 1; }
}
mean_step_ms() {
  awk -v a="$(field step_ms <"$tmp/$1.0")" -v b="$(field step_ms <"$tmp/$1.1")" 'BEGIN { printf "%.1f", (a + b) / 2 }'
}

both bare
both allreduce
both ddp
compute=$(mean_step_ms bare)
allreduce=$(mean_step_ms allreduce)
step=$(mean_step_ms ddp)
grad=$(field grad_bytes <"$tmp/ddp.0")
buckets=$(field buckets <"$tmp/ddp.0")
cores=$(field machine_cores <"$tmp/ddp.0")
busy_bare=$(field machine_busy_ms <"$tmp/bare.0")
busy_allreduce=$(field machine_busy_ms <"$tmp/allreduce.0")
busy_ddp=$(field machine_busy_ms <"$tmp/ddp.0")
echo "2 hosts x 1 rank, ResNet18 3x32x32, batch 32, SGD, 1 thread/rank, Gloo, link $rate, $steps timed steps," \
  "malloc ${MALLOC:-heap}, bucket view ${BUCKET_VIEW:-on}, $cores cores shared by both hosts"
echo "  gradients $grad bytes in $buckets buckets (--bucket-cap-mb $bucket_mb)"
printf '  compute alone (bare loop)    %8.1f ms/step\n' "$compute"
printf '  all-reduce alone             %8.1f ms/step  (%.0f MB/s of gradients)\n' "$allreduce" \
  "$(awk -v g="$grad" -v t="$allreduce" 'BEGIN { print g / t / 1000 }')"
printf '  DDP step                     %8.1f ms/step  (%.3f x compute alone)\n' "$step" \
  "$(awk -v a="$step" -v b="$compute" 'BEGIN { print a / b }')"
printf '  all-reduce hidden behind backward: %.3f (compute + all-reduce - step) / all-reduce\n' \
  "$(awk -v c="$compute" -v a="$allreduce" -v s="$step" 'BEGIN { print (c + a - s) / a }')"
printf '  rank 0 timeline: all-reduce time inside backward spans %s\n' \
  "$(python3 "$here/timeline_overlap.py" "$tmp/timeline_ddp.rank0.json")"
printf '  machine busy CPU per step (all cores): compute alone %.1f ms, all-reduce alone %.1f ms, DDP step %.1f ms\n' \
  "$busy_bare" "$busy_allreduce" "$busy_ddp"
awk -v c="$compute" -v a="$allreduce" -v bb="$busy_bare" -v ba="$busy_allreduce" -v n="$cores" 'BEGIN {
  floor = (bb + ba) / n; if (floor < c) floor = c
  printf "  on %d shared cores the step needs >= %.1f ms: best possible (compute + all-reduce - step) / all-reduce here %.3f\n",
    n, floor, (c + a - floor) / a }'
