#!/usr/bin/env bash
# What a lost host costs on emulated hosts (scripts/netns-hosts.sh: three network namespaces on one bridge,
# one rank each): in place against rounds, in one run. W1 on Fashion-MNIST, 2 epochs; every process of
# host 2 is killed (kill -9 of its launcher and its rank: the host is gone) right after step 450.
#
#   in place: host 0 runs `lockstep run --recovery in-place --rdzv-endpoint 10.231.0.1:PORT -- lockstep fit
#             --elastic`, hosts 1 and 2 run the same line and join (admitted at step 6: rank 0 waits there
#             for them, LOCKSTEP_FAULT=0:5:joins2); host 0's launcher announces host 2's rank lost once its
#             launcher has been silent for --heartbeat-timeout 3.
#   rounds:   the three hosts run `lockstep run --nnodes 2:3 --rdzv-backend c10d --max-restarts 1` of
#             `lockstep fit --ckpt-every-n-steps 100`; the two left meet again without host 2 (keep-alive 1 s,
#             3 misses) and resume from last.ckpt.
#
# For each: steps trained again, seconds from the kill to the first step beyond the last one before it, the
# final val_acc. Needs root (network namespaces); exit 3 with the reason where the machine forbids them.
#
#   bench/elastic_hosts.sh [path/to/lockstep]      (default build/lockstep)
set -u
bin=$(realpath "${1:-build/lockstep}")
[[ -x $bin ]] || { echo "elastic_hosts: '$bin' is not the lockstep binary" >&2; exit 2; }
hosts="$(cd "$(dirname "$0")/.." && pwd)/scripts/netns-hosts.sh"
export LOCKSTEP_NETNS=lsbench
work=$(mktemp -d /tmp/lockstep-elastic-hosts.XXXXXX)
trap '"$hosts" stop >/dev/null 2>&1; rm -rf "$work"' EXIT
"$hosts" start --hosts 3 >"$work/start.out" 2>&1 || { cat "$work/start.out"; exit 3; }

. "$(dirname "$0")/elastic_kill_lib.sh"
fit=(--max-epochs 2 --seed 7 --progress off --threads 1 --num-workers 0 --log-every-n-steps 1)

# launch MODE N: host N's launcher, in the background; its output in $work/MODE/hostN.log.
launch() {
  local mode=$1 n=$2 dir=$work/$1
  local line
  if [[ $mode == in-place ]]; then
    line=("$bin" run --nproc-per-node 1 --rdzv-endpoint 10.231.0.1:29420 --rdzv-id bench-in-place --recovery
      in-place --heartbeat-timeout 3 -- env LOCKSTEP_FAULT=0:5:joins2 "$bin" fit --elastic "${fit[@]}"
      --metrics-file "$dir/m.jsonl")
  else
    line=("$bin" run --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 10.231.0.1:29421
      --rdzv-id bench-rounds --max-restarts 1 --rdzv-conf last_call_timeout=2,keep_alive_interval=1,keep_alive_max_attempt=3
      -- "$bin" fit "${fit[@]}" --ckpt-dir "$dir/ck" --ckpt-every-n-steps 100 --metrics-file "$dir/m.jsonl")
  fi
  ip netns exec "${LOCKSTEP_NETNS}$n" "${line[@]}" >"$dir/host$n.log" 2>&1 &
}

run_mode() {
  local mode=$1 dir=$work/$1 kill_at=450
  mkdir -p "$dir"
  launch "$mode" 0
  local first=$!
  until grep -q '"step":1,' "$dir/m.jsonl" 2>/dev/null || [[ $mode == rounds ]]; do sleep 0.01; done
  launch "$mode" 1
  local second=$!
  launch "$mode" 2
  until grep -q "\"step\":$kill_at," "$dir/m.jsonl" 2>/dev/null; do sleep 0.01; done
  kill_and_time "$dir/m.jsonl" kill -9 $("$hosts" pids 2)
  wait "$first"
  local status=$?
  wait "$second"
  local redone val
  redone=$(steps_redone "$dir/m.jsonl")
  val=$(final_val_acc "$dir/m.jsonl")
  printf "%-8s host 0 exit %d  host 2 killed after step %4d  steps trained again %4d  kill -> next new step %6.2f s  final val_acc %s\n" \
    "$mode" "$status" "$kill_before" "$redone" "$kill_seconds" "$val"
  grep -h 'membership change\|round [0-9]*: ' "$dir"/host0.log | sed 's/^/    /' | head -4
}

run_mode in-place
run_mode rounds
