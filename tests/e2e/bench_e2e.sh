#!/bin/bash
# End-to-end checks of `lockstep bench` with real processes: tiny sizes and limits, so that each case
# takes seconds. They check the output's shape and arithmetic, never the timings themselves.
# Usage: bench_e2e.sh CASE LOCKSTEP
#   CASE: allreduce | allreduce_3ranks | allreduce_backend | allreduce_under_run | scaling | bad_flags |
#         help | peer | peer_no_torch
# Exit status 77 (ctest's SKIP_RETURN_CODE) when the case cannot run here, with the reason.
set -u
case_name=$1 lockstep=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_e2e[$case_name]: $*" >&2; exit 1; }
skip() { echo "lockstep-skip: bench_e2e[$case_name]: $*"; exit 77; }

# run_ok CMD...: CMD must exit 0; its stdout is in $work/out, its stderr in $work/err.
run_ok() {
  "$@" >"$work/out" 2>"$work/err"
  local status=$?
  cat "$work/out" "$work/err"
  [ "$status" -eq 0 ] || fail "exit status $status: $*"
}

# expect_failure STATUS PATTERN -- CMD... (e2e_lib.sh)
. "$(dirname "$0")/e2e_lib.sh"

# check_allreduce_rows FILE WORLD SIZE...: FILE holds exactly one markdown row per SIZE ("4 KiB"), in
# that order, each with 8 numbers (iters, then latency/algbw/busbw of lockstep and of the baseline,
# then the ratio), positive latencies, busbw = algbw * 2(n-1)/n and ratio = lockstep / baseline latency
# (to the printed precision).
check_allreduce_rows() {
  local file=$1 world=$2 lockstep_factor=2
  shift 2
  if [ "$1" = --reduce-scatter ]; then  # the lockstep column's busbw is a reduce-scatter's, (n-1)/n
    lockstep_factor=1
    shift
  fi
  local want
  want=$(printf '%s\n' "$@")
  local got
  got=$(grep -E '^\| +[0-9]+ (B|KiB|MiB|GiB) \|' "$file" | awk -F'|' '{ gsub(/^ +| +$/, "", $2); print $2 }')
  [ "$got" = "$want" ] || fail "size rows: got [$(echo $got)], expected [$(echo $want)]"
  grep -E '^\| +[0-9]+ (B|KiB|MiB|GiB) \|' "$file" | awk -F'|' -v n="$world" -v lf="$lockstep_factor" '
    function num(s) { gsub(/ /, "", s); if (s !~ /^[0-9]+(\.[0-9]+)?$/) { bad = bad " [" s "]"; return -1 } return s + 0 }
    {
      iters = num($3); lat = num($4); alg = num($5); bus = num($6); blat = num($7); balg = num($8); bbus = num($9); ratio = num($10)
      if (bad != "") { print "non-numeric field(s)" bad " in: " $0; exit 1 }
      if (iters < 1 || lat <= 0 || blat <= 0) { print "iters/latency not positive: " $0; exit 1 }
      f = 2 * (n - 1) / n; lfn = lf * (n - 1) / n
      if (bus - alg * lfn > 0.0016 || alg * lfn - bus > 0.0016) { print "busbw != algbw * " lfn ": " $0; exit 1 }
      if (bbus - balg * f > 0.0016 || balg * f - bbus > 0.0016) { print "baseline busbw != algbw * " f ": " $0; exit 1 }
      # Latencies are printed to 0.1 us and the ratio to 0.001: allow for that rounding.
      r = lat / blat; tol = r * (0.051 / lat + 0.051 / blat) + 0.0006
      if (r - ratio > tol || ratio - r > tol) { print "ratio " ratio " != " lat " / " blat ": " $0; exit 1 }
    }' || fail "bad row"
}

case $case_name in
allreduce)
  run_ok "$lockstep" bench allreduce --max-size 64K --iters 3
  # The default --backend auto names what it resolved to; a backend other than gloo gets its own Gloo
  # baseline group, gloo itself is compared with raw c10d over the same group.
  grep -Eq '^all_reduce sum float32, 2 rank\(s\); lockstep: ProcessGroup \(gloo, from auto\); baseline: raw c10d gloo \(same group\); message: new_comm_buffer$|^all_reduce sum float32, 2 rank\(s\); lockstep: ProcessGroup \([a-z]+, from auto\); baseline: raw c10d gloo; message: new_comm_buffer$' \
    "$work/out" || fail "no header line"
  grep -Eq '^\| +size \| +iters \| +lockstep us \| +algbw GB/s \| +busbw GB/s \| +baseline us \| +algbw GB/s \| +busbw GB/s \| +ratio \|$' \
    "$work/out" || fail "no table header"
  check_allreduce_rows "$work/out" 2 "4 KiB" "16 KiB" "64 KiB"
  grep -q '^\[rank' "$work/out" && fail "rank 0's table should not be prefixed"
  ;;
allreduce_3ranks)
  # busbw's factor 2(n-1)/n at n = 3, --factor 2, --min-size, and one --json line per size.
  run_ok "$lockstep" bench allreduce --nproc 3 --backend gloo --min-size 8K --max-size 32K --factor 2 --iters 2 \
    --json "$work/ar.jsonl"
  check_allreduce_rows "$work/out" 3 "8 KiB" "16 KiB" "32 KiB"
  [ "$(wc -l <"$work/ar.jsonl")" -eq 3 ] || fail "--json: expected 3 lines, got $(wc -l <"$work/ar.jsonl")"
  [ "$(grep -o '"bytes": [0-9]*' "$work/ar.jsonl" | tr -dc '0-9\n' | tr '\n' ' ')" = "8192 16384 32768 " ] ||
    fail "--json: wrong sizes"
  grep -q '"world_size": 3, "backend": "gloo"' "$work/ar.jsonl" || fail "--json: no world_size/backend"
  ;;
allreduce_backend)
  # --backend goes through lockstep::comm::parse_backend. With a backend other than gloo the baseline is
  # a second, Gloo group over the first one's store.
  run_ok "$lockstep" bench allreduce --backend gloo --max-size 4K --iters 2
  grep -Fq 'lockstep: ProcessGroup (gloo); baseline: raw c10d gloo (same group); message: new_comm_buffer' "$work/out" ||
    fail "gloo: header"
  check_allreduce_rows "$work/out" 2 "4 KiB"
  run_ok "$lockstep" bench allreduce --backend shm --max-size 16K --iters 2
  grep -Eq 'lockstep: ProcessGroup \(shm\); baseline: raw c10d gloo; message: new_comm_buffer$' "$work/out" ||
    fail "--backend shm: header"
  check_allreduce_rows "$work/out" 2 "4 KiB" "16 KiB"
  # --buffer plain: an ordinary tensor (shm copies it through its segment); a bad value is a usage error.
  run_ok "$lockstep" bench allreduce --backend shm --max-size 4K --iters 2 --buffer plain
  grep -Eq 'lockstep: ProcessGroup \(shm\); baseline: raw c10d gloo; message: at::zeros$' "$work/out" ||
    fail "--buffer plain: header"
  check_allreduce_rows "$work/out" 2 "4 KiB"
  # --op reduce-scatter: lockstep's path reduce-scatters (ZeRO-2's and FSDP's gradients), the baseline still
  # all-reduces the same message; on shm and on Gloo (LibTorch 1.13's has no reduce-scatter of its own).
  for backend in shm gloo; do
    run_ok "$lockstep" bench allreduce --backend $backend --max-size 16K --iters 2 --op reduce-scatter
    grep -Eq "^reduce_scatter sum float32, 2 rank\(s\); lockstep: ProcessGroup \($backend\); baseline: raw c10d gloo( \(same group\))? all_reduce of the same message; message: new_comm_buffer\$" \
      "$work/out" || fail "--op reduce-scatter on $backend: header"
    check_allreduce_rows "$work/out" 2 --reduce-scatter "4 KiB" "16 KiB"
  done
  expect_failure 2 "--op must be allreduce or reduce-scatter, got 'gather'" -- \
    "$lockstep" bench allreduce --op gather
  ;;
allreduce_under_run)
  # The helper is also a plain rank program; build/bench/allreduce_bench (docs/benchmarks.md) links to it.
  build=$(dirname "$lockstep")
  for program in "$build/lockstep-bench-allreduce" "$build/bench/allreduce_bench"; do
    run_ok "$lockstep" run --nproc-per-node 2 --standalone -- "$program" --max-size 4K --iters 2
    sed -n 's/^\[rank 0\] //p' "$work/out" >"$work/rank0"
    check_allreduce_rows "$work/rank0" 2 "4 KiB"
    grep -q '^\[rank 1\]' "$work/out" && fail "rank 1 should print nothing"
  done
  ;;
scaling)
  run_ok "$lockstep" bench scaling --model mlp --ranks 1,2 --epochs 1 --run-dir "$work/scaling" -- --limit-train-batches 20
  # --run-dir: the table as scaling.csv (the printed numbers) and hparams.yaml, which `lockstep report` reads.
  [ "$(head -1 "$work/scaling/scaling.csv")" = "ranks,time_per_epoch_s,speedup,efficiency_pct" ] \
    || fail "scaling.csv header: $(head -1 "$work/scaling/scaling.csv")"
  [ "$(grep -c '^[12],' "$work/scaling/scaling.csv")" -eq 2 ] || fail "scaling.csv lacks a row per rank count"
  [ -s "$work/scaling/hparams.yaml" ] || fail "no hparams.yaml in the run dir"
  "$lockstep" report "$work/scaling" -o "$work/scaling.html" >/dev/null || fail "lockstep report of a scaling run dir failed"
  grep -q 'id="chart-scaling-efficiency" data-points="2"' "$work/scaling.html" || fail "the report has no scaling chart of 2 points"
  grep -Eq '^lockstep fit --model mlp --data fashion-mnist, 1 epoch\(s\), batch 64/rank, 1 thread\(s\)/rank --limit-train-batches 20$' \
    "$work/out" || fail "no header line"
  grep -Fxq '| ranks | time/epoch | speedup | efficiency |' "$work/out" || fail "no table header"
  rows=$(grep -Ec '^\| [0-9]+ \| ' "$work/out")
  [ "$rows" -eq 2 ] || fail "expected 2 table rows, got $rows"
  grep -Eq '^\| 1 \| [0-9]+\.[0-9]{2} s \| 1\.00x \| 100% \|$' "$work/out" || fail "bad 1-rank row"
  grep -Eq '^\| 2 \| [0-9]+\.[0-9]{2} s \| [0-9]+\.[0-9]{2}x \| [0-9]+% \|$' "$work/out" || fail "bad 2-rank row"
  # speedup = t1 / t2 and efficiency = speedup / 2, to the printed precision.
  grep -E '^\| [0-9]+ \| ' "$work/out" | awk -F'|' '
    { t[NR] = $3 + 0; s[NR] = $4 + 0; e[NR] = $5 + 0 }
    END {
      sp = t[1] / t[2]
      if (sp - s[2] > 0.01 + 0.01 * sp || s[2] - sp > 0.01 + 0.01 * sp) { print "speedup " s[2] " != " t[1] " / " t[2]; exit 1 }
      if (e[2] - 50 * s[2] > 1.01 || 50 * s[2] - e[2] > 1.01) { print "efficiency " e[2] "% != speedup / 2"; exit 1 }
    }' || fail "inconsistent table"
  grep -Fq 'scaled to the whole training split (60000 samples)' "$work/out" || fail "no note on the scaling"
  # A GPT on text: the split's size read from the banner's windows.
  for i in $(seq 400); do echo "every rank sums the same tensor"; done >"$work/book.txt"
  run_ok "$lockstep" bench scaling --model gpt --data text --ranks 1 --epochs 1 -- --limit-train-batches 5 \
    --limit-val-batches 1 --text-file "$work/book.txt"
  grep -Eq '^\| 1 \| [0-9]+\.[0-9]{2} s \| 1\.00x \| 100% \|$' "$work/out" || fail "no row for gpt on text"
  ;;
bad_flags)
  expect_failure 2 "--iters must be >= 1, got 0" -- "$lockstep" bench allreduce --iters 0
  expect_failure 2 "--nproc must be >= 1, got 0" -- "$lockstep" bench allreduce --nproc 0
  expect_failure 2 "abc" -- "$lockstep" bench allreduce --nproc abc
  expect_failure 2 "--max-size '64X' is not a size" -- "$lockstep" bench allreduce --max-size 64X
  expect_failure 2 "--min-size 6 is not a positive multiple of 4 bytes" -- "$lockstep" bench allreduce --min-size 6
  expect_failure 2 "--buffer must be comm or plain, got 'shared'" -- "$lockstep" bench allreduce --buffer shared
  expect_failure 2 "--min-size (67108864 bytes) is larger than --max-size (4096 bytes)" -- \
    "$lockstep" bench allreduce --min-size 64M --max-size 4K
  expect_failure 2 "--backend 'nope' is not known (expected one of: auto, gloo, shm, hier, nccl, mpi)" -- "$lockstep" bench allreduce --backend nope
  expect_failure 2 "--backend nccl: this benchmark all-reduces CPU tensors" -- \
    "$lockstep" bench allreduce --backend nccl
  expect_failure 2 "--factor must be >= 2, got 1" -- "$lockstep" bench allreduce --factor 1
  expect_failure 2 "--bogus" -- "$lockstep" bench allreduce --bogus 1
  expect_failure 2 "--ranks '1,x' is not a list of rank counts" -- "$lockstep" bench scaling --ranks 1,x
  expect_failure 2 "--ranks '1,1' names 1 twice" -- "$lockstep" bench scaling --ranks 1,1
  expect_failure 2 "--model 'nope' is not known (expected one of: mlp, cnn, resnet18, gpt)" -- \
    "$lockstep" bench scaling --model nope
  expect_failure 2 "--epochs must be >= 1, got 0" -- "$lockstep" bench scaling --epochs 0
  expect_failure 2 "'--devices=4' after -- is set by this command" -- "$lockstep" bench scaling -- --devices=4
  expect_failure 2 "--limit-train-batches '1.5' is not a batch count" -- \
    "$lockstep" bench scaling -- --limit-train-batches 1.5
  expect_failure 2 "--epochs must be >= 1, got 0" -- "$lockstep" bench peer --epochs 0
  expect_failure 2 "--limit-train-batches must be >= 0, got -1" -- "$lockstep" bench peer --limit-train-batches -1
  expect_failure 2 "unknown benchmark 'nope' (expected one of: allreduce, scaling, peer)" -- "$lockstep" bench nope
  expect_failure 2 "usage: lockstep bench <benchmark>" -- "$lockstep" bench
  # A benchmark starts its own ranks: as one rank of a job it refuses instead of joining that job.
  expect_failure 2 "a benchmark starts its own local ranks" -- \
    "$lockstep" run --nproc-per-node 1 --standalone -- "$lockstep" bench scaling --epochs 1
  ;;
help)
  run_ok "$lockstep" bench --help
  for b in allreduce scaling peer; do grep -Eq "^  $b +" "$work/out" || fail "bench --help lacks $b"; done
  run_ok "$lockstep" --help
  grep -Eq '^  bench +' "$work/out" || fail "lockstep --help lacks bench"
  for b in allreduce scaling peer; do
    run_ok "$lockstep" bench "$b" --help
    grep -q "^Usage: lockstep bench $b" "$work/out" || fail "bench $b --help: no usage line"
    grep -q "^Exit status:" "$work/out" || fail "bench $b --help: no exit status"
  done
  ;;
peer)
  # The interpreter `lockstep bench peer` uses: the one CMake found with this build's torch (ctest passes it
  # as LOCKSTEP_PYTHON) unless LOCKSTEP_PEER_PYTHON says otherwise.
  python=${LOCKSTEP_PEER_PYTHON:-${LOCKSTEP_PYTHON:-}}
  "$python" -c 'import torch, torch.distributed' 2>/dev/null ||
    skip "'$python' cannot import torch (LOCKSTEP_PYTHON: see CMake's warning)"
  [ -d /usr/share/datasets/fashion-mnist ] || skip "no Fashion-MNIST (install dataset-fashion-mnist)"
  run_ok "$lockstep" bench peer --epochs 1 --limit-train-batches 20 --run-dir "$work/peer"
  # --run-dir: the table as peer.csv (one row per epoch) and hparams.yaml, which `lockstep report` reads.
  [ "$(grep -c '^1,' "$work/peer/peer.csv")" -eq 1 ] || fail "peer.csv lacks the epoch row: $(cat "$work/peer/peer.csv")"
  "$lockstep" report "$work/peer" -o "$work/peer.html" >/dev/null || fail "lockstep report of a peer run dir failed"
  grep -q 'Python DDP peer' "$work/peer.html" || fail "the report has no peer section"
  grep -Fxq '| epoch | peer epoch_s | peer val_acc | lockstep epoch_s | lockstep val_acc |' "$work/out" ||
    fail "no table header"
  grep -Eq '^\| 1 \| [0-9]+\.[0-9]{3} \| 0\.[0-9]{4} \| [0-9]+\.[0-9]{3} \| 0\.[0-9]{4} \|$' "$work/out" ||
    fail "no epoch row"
  [ "$(grep -Ec '^\| [0-9]+ \| ' "$work/out")" -eq 1 ] || fail "expected exactly 1 epoch row"
  grep -Eq '^median epoch_s: peer [0-9.]+ s, lockstep [0-9.]+ s; speed ratio peer/lockstep = [0-9]+\.[0-9]{2}x$' \
    "$work/out" || fail "no ratio line"
  grep -Eq '^final val_acc after 1 epoch\(s\): peer 0\.[0-9]{4}, lockstep 0\.[0-9]{4}, \|diff\| = 0\.[0-9]{4}$' \
    "$work/out" || fail "no accuracy line"
  # 20 batches of the seeds' recipe learn something on both sides.
  awk '/^\| 1 \|/ { split($0, f, "|"); if (f[4] + 0 < 0.3 || f[6] + 0 < 0.3) exit 1 }' "$work/out" ||
    fail "val_acc below 0.3 after 20 batches"
  ;;
peer_no_torch)
  # An interpreter without PyTorch: a clear error naming the Debian package, before anything starts.
  printf '#!/bin/sh\necho "ModuleNotFoundError: No module named '"'"'torch'"'"'" >&2\nexit 1\n' >"$work/python3"
  chmod +x "$work/python3"
  LOCKSTEP_PEER_PYTHON=$work/python3 expect_failure 1 "pip install torch" -- "$lockstep" bench peer --epochs 1
  grep -Fq "$work/python3 cannot import torch (ModuleNotFoundError: No module named 'torch')" "$work/err" ||
    fail "the error does not name the interpreter and Python's message"
  LOCKSTEP_PEER_SCRIPT=$work/nowhere.py expect_failure 1 "LOCKSTEP_PEER_SCRIPT=$work/nowhere.py" -- \
    "$lockstep" bench peer --epochs 1
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "bench_e2e[$case_name]: ok"
