#!/bin/bash
# `lockstep export` with real checkpoints of `lockstep fit` (2 ranks, cnn on synthetic data: F32 parameters,
# BatchNorm buffers, an I64 num_batches_tracked).
# Usage: export_e2e.sh CASE LOCKSTEP PYTHON3
#   roundtrip  final.pt and last.ckpt exported; every tensor equal, bit for bit, name for name and in order,
#              to final.safetensors (json + numpy) and to the archives loaded by torch.jit.load
#   bad_input  a missing file, a file that is not an archive, a truncated checkpoint, one with a flipped
#              byte or without its checksum trailer, an unwritable output
#              directory, the input as output, no argument: clear errors naming the path, nothing written
set -u
case_name=$1 lockstep=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "export_e2e[$case_name]: $*" >&2; exit 1; }
. "$(dirname "$0")/e2e_lib.sh"
check="$(dirname "$0")/check_safetensors.py"

fit() {
  "$lockstep" fit --devices 2 --model cnn --data synthetic --synthetic-size 256 --max-epochs 2 --batch-size 32 \
    --limit-val-batches 1 --progress off --threads 1 --ckpt-dir "$work/ck" >"$work/fit.out" 2>&1 ||
    { cat "$work/fit.out"; fail "fit failed"; }
  [ -s "$work/ck/last.ckpt" ] && [ -s "$work/ck/final.pt" ] && [ -s "$work/ck/final.safetensors" ] ||
    fail "fit wrote no last.ckpt, final.pt or final.safetensors: $(ls -A "$work/ck")"
}

# same_tensors A.safetensors B.safetensors: the same names in the same order, the same dtypes, shapes and bytes.
same_tensors() {
  "$python" - "$(dirname "$0")" "$@" <<'PY' || exit 1
import sys
sys.path.insert(0, sys.argv[1])
from check_safetensors import read_safetensors
a, a_dtypes, _ = read_safetensors(sys.argv[2])
b, b_dtypes, _ = read_safetensors(sys.argv[3])
assert list(a) == list(b), f"names/order differ:\n  {list(a)}\n  {list(b)}"
for name in a:
    assert a_dtypes[name] == b_dtypes[name], f"{name}: {a_dtypes[name]} vs {b_dtypes[name]}"
    assert a[name].shape == b[name].shape, f"{name}: {a[name].shape} vs {b[name].shape}"
    assert a[name].tobytes() == b[name].tobytes(), f"{name}: values differ"
print(f"same tensors: {len(a)} in {sys.argv[2]} and {sys.argv[3]}")
PY
}

case $case_name in
roundtrip)
  fit
  # final.pt -> an explicit output in a directory that does not exist yet.
  "$lockstep" export "$work/ck/final.pt" -o "$work/out/final_export.safetensors" >"$work/out1" 2>&1 ||
    { cat "$work/out1"; fail "export of final.pt failed"; }
  cat "$work/out1"
  grep -q "^exported [0-9]* tensors ([0-9]* values) of module archive '$work/ck/final.pt' to $work/out/final_export.safetensors" \
    "$work/out1" || fail "no export report"
  "$python" "$check" "$work/out/final_export.safetensors" "$work/ck/final.pt" format=pt producer="lockstep export" \
    source=final.pt || fail "the export of final.pt differs from final.pt"
  same_tensors "$work/out/final_export.safetensors" "$work/ck/final.safetensors"

  # last.ckpt -> the default output next to it; its model is the final one (written at the last epoch end).
  "$lockstep" export "$work/ck/last.ckpt" >"$work/out2" 2>&1 || { cat "$work/out2"; fail "export of last.ckpt failed"; }
  cat "$work/out2"
  grep -q "of checkpoint of model 'cnn' '$work/ck/last.ckpt' to $work/ck/last.safetensors" "$work/out2" ||
    fail "no export report for last.ckpt"
  "$python" "$check" "$work/ck/last.safetensors" "$work/ck/last.ckpt#model" model=cnn epoch=2 producer="lockstep export" \
    source=last.ckpt || fail "the export of last.ckpt differs from the checkpoint's model"
  same_tensors "$work/ck/last.safetensors" "$work/ck/final.safetensors"
  ls -A "$work/ck" "$work/out" | grep -q '^\.' && fail "temporary files left: $(ls -A "$work/ck" "$work/out")"
  ;;
bad_input)
  expect_failure 2 "lockstep export: checkpoint is required" -- "$lockstep" export
  expect_failure 1 "'$work/absent.ckpt' does not exist: give a checkpoint of \`lockstep fit\`" -- \
    "$lockstep" export "$work/absent.ckpt"
  echo "not an archive" >"$work/notes.ckpt"
  expect_failure 1 "'$work/notes.ckpt' is not a lockstep checkpoint or a LibTorch module archive" -- \
    "$lockstep" export "$work/notes.ckpt"
  [ -e "$work/notes.safetensors" ] && fail "a failed export left an output file"
  fit
  head -c 100000 "$work/ck/last.ckpt" >"$work/torn.ckpt"
  expect_failure 1 "'$work/torn.ckpt' is not a lockstep checkpoint or a LibTorch module archive" -- \
    "$lockstep" export "$work/torn.ckpt"
  # A checkpoint with one flipped bit: its checksum no longer matches (LibTorch alone would export it).
  "$python" - "$work/ck/last.ckpt" "$work/flipped.ckpt" <<'PY' || fail "cannot flip a byte"
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[len(data) // 2] ^= 0x01
open(sys.argv[2], "wb").write(data)
PY
  expect_failure 1 "checkpoint '$work/flipped.ckpt' is damaged: the crc32 of its" -- \
    "$lockstep" export "$work/flipped.ckpt" -o "$work/flipped.safetensors"
  [ -e "$work/flipped.safetensors" ] && fail "a damaged checkpoint was exported"
  # Its archive without the trailer (cut where lockstep's bytes end): a whole zip, but not as written.
  size=$(stat -c %s "$work/ck/last.ckpt")
  head -c $((size - 24)) "$work/ck/last.ckpt" >"$work/untrailed.ckpt"
  expect_failure 1 "checkpoint '$work/untrailed.ckpt' does not end with lockstep's checksum trailer" -- \
    "$lockstep" export "$work/untrailed.ckpt"
  : >"$work/a_file"
  expect_failure 1 "cannot create the output directory '$work/a_file': " -- \
    "$lockstep" export "$work/ck/final.pt" -o "$work/a_file/w.safetensors"
  expect_failure 1 "is the input itself: choose another with -o PATH" -- \
    "$lockstep" export "$work/ck/final.pt" -o "$work/ck/../ck/final.pt"
  # A failed export over an existing file leaves it intact.
  cp "$work/ck/final.safetensors" "$work/keep.safetensors"
  expect_failure 1 "is not a lockstep checkpoint" -- "$lockstep" export "$work/torn.ckpt" -o "$work/keep.safetensors"
  cmp -s "$work/ck/final.safetensors" "$work/keep.safetensors" || fail "a failed export changed the existing output"
  ls -A "$work" "$work/ck" | grep -q '^\.' && fail "temporary files left: $(ls -A "$work" "$work/ck")"
  "$lockstep" export --help | grep -q "OUT.safetensors" || fail "no --help"
  "$lockstep" --help | grep -q "^  export" || fail "export is not in lockstep --help"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "export_e2e[$case_name]: ok"
