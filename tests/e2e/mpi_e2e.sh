#!/bin/bash
# End-to-end checks of ranks started by Open MPI's mpirun (docs/mpi.md).
# Usage: mpi_e2e.sh CASE LOCKSTEP PYTHON3 [COMM_OPS_WORKER] [TP_GPT_WORKER]
#   fit_default    `mpirun -np 2 lockstep fit` with no rendezvous flags (default backend, MASTER_ADDR/PORT
#                  defaults) trains to exactly the metrics of `lockstep fit --devices 2 --backend gloo`
#   fit_mpi        the same with --backend mpi (lockstep's ProcessGroupMpi)
#   mpi_not_mpirun `--backend mpi` under `lockstep run` fails on every rank, and `lockstep fit --devices 2
#                  --backend mpi` before starting any, saying to use mpirun
#   tp_mesh        a 2 x 2 DeviceMesh over MPI subgroups (tp_gpt_worker) against 2 data-parallel ranks
#   all_ops_2, all_ops_3, all_ops_2_large  comm_ops_worker under mpirun with the mpi backend: every
#                  collective, op, dtype and size checked against its own expectation and against a Gloo group
# Exit 77 (skipped) only when mpirun is not installed.
set -u
case_name=$1 lockstep=$2 python=$3 ops_worker=${4:-} tp_worker=${5:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "mpi_e2e[$case_name]: $*" >&2; exit 1; }
. "$(dirname "$0")/e2e_lib.sh"

if ! command -v mpirun >/dev/null; then
  echo "lockstep-skip: mpi_e2e[$case_name]: mpirun not found (Debian: apt-get install openmpi-bin, or scripts/install-deps.sh)"
  exit 77
fi
# As root Open MPI refuses to start without --allow-run-as-root; --oversubscribe: 3 ranks on 2 cores.
mpirun=(mpirun --allow-run-as-root --oversubscribe)
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Real Fashion-MNIST (dataset-fashion-mnist), kept short, and the same data, model, seed and per-rank batch
# for the reference and the MPI run.
fit_args=(--model mlp --max-epochs 2 --limit-train-batches 30 --batch-size 32 --seed 11 --progress off)

# same_every_epoch REFERENCE METRICS: every epoch's train_loss, val_loss and val_acc are equal, bit for bit
# (2 ranks: every backend sums a + b, which does not depend on the order).
same_every_epoch() {
  "$python" - "$1" "$2" <<'PY' || fail "metrics differ from the reference (lockstep fit --devices 2 --backend gloo)"
import json, sys
def epochs(path):
    return [json.loads(l) for l in open(path) if '"batch"' not in l]
ref, got = epochs(sys.argv[1]), epochs(sys.argv[2])
assert len(ref) == len(got) == 2, (len(ref), len(got))
for r, g in zip(ref, got):
    assert g["world_size"] == r["world_size"] == 2, (g["world_size"], r["world_size"])
    for key in ("epoch", "step", "train_samples", "train_loss", "val_loss", "val_acc"):
        assert g[key] == r[key], f"epoch {r['epoch']} {key}: {g[key]!r} vs reference {r[key]!r}"
print("same metrics as the reference in every epoch: " +
      ", ".join(f"{k} {got[-1][k]!r}" for k in ("train_loss", "val_loss", "val_acc")))
PY
}

reference() {
  "$lockstep" fit --devices 2 --backend gloo "${fit_args[@]}" --metrics-file "$work/ref.jsonl" >"$work/ref.out" 2>&1 ||
    { cat "$work/ref.out"; fail "reference run failed"; }
}

case $case_name in
fit_default)
  reference
  # No MASTER_ADDR/PORT: one node, so lockstep takes 127.0.0.1:29500 and the run id from mpirun's job id.
  "${mpirun[@]}" -np 2 "$lockstep" fit "${fit_args[@]}" --metrics-file "$work/m.jsonl" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "mpirun -np 2 lockstep fit failed"; }
  cat "$work/out"
  grep -Eq "^final val_acc 0\.[0-9]+ over 10000 test images \(2 rank" "$work/out" || fail "no final line from rank 0"
  same_every_epoch "$work/ref.jsonl" "$work/m.jsonl"
  ;;
fit_mpi)
  reference
  "${mpirun[@]}" -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(free_port)" \
    "$lockstep" fit --backend mpi "${fit_args[@]}" --metrics-file "$work/m.jsonl" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "mpirun -np 2 lockstep fit --backend mpi failed"; }
  cat "$work/out"
  grep -Eq "^final val_acc 0\.[0-9]+ over 10000 test images \(2 rank" "$work/out" || fail "no final line from rank 0"
  same_every_epoch "$work/ref.jsonl" "$work/m.jsonl"
  ;;
mpi_not_mpirun)
  # Each process of `lockstep run` is an MPI world of its own: refused on every rank, with the fix.
  expect_failure 1 "The mpi backend needs its ranks started by mpirun, one process per rank: \`mpirun -np 2" -- \
    "$lockstep" run --nproc-per-node 2 --standalone -- "$lockstep" fit --backend mpi "${fit_args[@]}"
  grep -Fq "(as root add --allow-run-as-root)" "$work/err" || fail "the error does not mention --allow-run-as-root"
  # Refused before MPI starts (two singletons starting at once race for Open MPI's session directory).
  grep -Fq "for lockstep but was not started by an MPI launcher" "$work/err" ||
    fail "the refusal did not come before MPI started"
  # lockstep fit starting the ranks itself refuses before starting any.
  expect_failure 2 "lockstep fit: --backend 'mpi' needs its ranks started by mpirun: run \`mpirun -np 2 lockstep fit" -- \
    "$lockstep" fit --devices 2 --backend mpi "${fit_args[@]}"
  ;;
all_ops_2 | all_ops_3 | all_ops_2_large)
  n=${case_name#all_ops_}
  n=${n%_large}
  [ -x "$ops_worker" ] || fail "comm_ops_worker not given or not executable: '$ops_worker'"
  # comm_ops_worker derives its sizes from the shm slot size (the mpi backend has none): 4096-byte slots
  # give small sizes for every dtype (0, 1, 1001, 1024, 1025, 2 x world x 1024 + 7 elements); `_large`
  # keeps the 4 MiB default, float32 only, up to one slot + 1 (4 MiB + 4 bytes): two of the mpi backend's
  # 4 MiB all-reduce pieces.
  if [ "$case_name" = all_ops_2_large ]; then
    sizes=(-x COMM_OPS_WORKER_DTYPES=float32 -x COMM_OPS_WORKER_MAX_BYTES=4194308)
  else
    sizes=(-x LOCKSTEP_SHM_SLOT_BYTES=4096)
  fi
  "${mpirun[@]}" -np "$n" -x COMM_WORKER_BACKEND=mpi -x LOCKSTEP_TIMEOUT=60 -x MASTER_ADDR=127.0.0.1 \
    -x MASTER_PORT="$(free_port)" "${sizes[@]}" "$ops_worker" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "comm_ops_worker failed"; }
  cat "$work/out"
  for ((r = 0; r < n; r++)); do
    grep -Eq "^rank $r/$n all_ops ok \(backend mpi, " "$work/out" || fail "rank $r did not report all_ops ok"
  done
  ;;
tp_mesh)
  # ProcessGroup::split and comm::DeviceMesh over MPI: a tensor-parallel GPT on 2 data x 2 tensor-parallel
  # ranks, its subgroups MPI communicators, gives the losses of 2 plain data-parallel ranks (float64, the
  # partial sums added in other orders only: within 1e-12), as over shm (tp_gpt_mesh.sh).
  [ -x "$tp_worker" ] || fail "tp_gpt_worker not given or not executable: '$tp_worker'"
  for shape in "4 2 mesh" "2 1 flat"; do
    read -r n t name <<<"$shape"
    "${mpirun[@]}" -np "$n" -x TP_GPT_WORKER_BACKEND=mpi -x LOCKSTEP_TIMEOUT=60 -x MASTER_ADDR=127.0.0.1 \
      -x MASTER_PORT="$(free_port)" "$tp_worker" --out "$work/$name" --steps 5 --tensor-parallel "$t" \
      >"$work/$name.out" 2>&1 || { cat "$work/$name.out"; fail "tp_gpt_worker on $n ranks failed"; }
    cat "$work/$name.out"
    grep -q "tp_gpt_worker ok (tp $t, dp 2, 5 steps) over mpi" "$work/$name.out" || fail "$name: no ok line over mpi"
  done
  paste "$work/mesh/cpp_losses.txt" "$work/flat/cpp_losses.txt" |
    awk '{ d = $1 - $2; if (d < 0) d = -d; print "step " NR - 1 ": 2 x 2 " $1 "  2 x 1 " $2 "  difference " d;
           if (d > 1e-12) bad = 1; n++ } END { exit bad || n != 5 }' ||
    fail "over MPI the 2 x 2 mesh's losses differ from the 2 data-parallel ranks' (above)"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "mpi_e2e[$case_name]: ok"
