#!/usr/bin/env bash
# lockstep's tensor-parallel GPT against PyTorch's torch.distributed.tensor.parallel, 2 CPU processes each,
# from the same initial weights and batches: the same losses for 20 steps (tests/e2e/tp_gpt_python.py).
#
#   tp_python_parity.sh LOCKSTEP TP_GPT_WORKER PYTHON
set -uo pipefail
lockstep=$1 worker=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$lockstep" run --nproc-per-node 2 --standalone -- "$worker" --out "$work" --steps 20 --tensor-parallel 2 \
  >"$work/cpp.out" 2>&1
status=$?
cat "$work/cpp.out"
[ "$status" -eq 0 ] || fail "the lockstep job exited with $status"
[ -s "$work/init.safetensors" ] && [ -s "$work/cpp_losses.txt" ] || fail "the lockstep job wrote no weights or losses"
"$python" "$(dirname "$0")/tp_gpt_python.py" "$work" --ranks 2 || fail "PyTorch's run differs (above)"
