#!/usr/bin/env bash
# A model that does not fit, under a memory cap (docs/benchmarks.md, "Sharded data parallel"): the same
# 4-rank run of a 6-layer 4096-wide MLP (87M parameters, Adam) with --strategy ddp and --strategy fsdp, each
# rank's address space capped with `ulimit -v` (inherited by every rank). ddp needs 16 bytes a parameter on
# every rank (1.4 GB) and fails; fsdp keeps 16/4 and trains. Prints each run's outcome and, for the run that
# trained, its peak RSS.
#
#   bash bench/memory_cap.sh BUILD_DIR [CAP_MB=2500]
set -uo pipefail
build=${1:?usage: memory_cap.sh BUILD_DIR [CAP_MB]}
cap_mb=${2:-2500}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "ulimit -v $((cap_mb * 1024)) (${cap_mb} MB of address space per rank), 4 ranks, mlp 6 x 4096, Adam"
for s in ddp fsdp; do
  (
    ulimit -v $((cap_mb * 1024))
    "$build/lockstep" fit --devices 4 --threads 1 --progress off --model mlp \
      --mlp-hidden 4096,4096,4096,4096,4096,4096 --max-epochs 1 --limit-train-batches 2 --limit-val-batches 1 \
      --strategy "$s" --metrics-file "$tmp/$s.jsonl" >"$tmp/$s.out" 2>&1
  )
  status=$?
  if [ $status -eq 0 ]; then
    rss=$(grep -o '"peak_rss_mb":[0-9.]*' "$tmp/$s.jsonl" | cut -d: -f2)
    state=$(grep -o '"model_state_mb":[0-9.]*' "$tmp/$s.jsonl" | cut -d: -f2)
    printf "  %-5s trained: model state %.0f MiB, peak RSS %.0f MiB per rank\n" "$s" "$state" "$rss"
  else
    why=$(grep -m1 -o "cannot map shared-memory segment[^:]*: Cannot allocate memory\|DefaultCPUAllocator: can't allocate memory[^(]*\|std::bad_alloc" "$tmp/$s.out")
    printf "  %-5s failed (exit %d): %s\n" "$s" "$status" "${why:-see its output}"
  fi
done
