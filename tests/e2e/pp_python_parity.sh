#!/usr/bin/env bash
# lockstep's pipeline-parallel GPT (1F1B, 2 stages, 4 micro-batches) against PyTorch's
# torch.distributed.pipelining Schedule1F1B, 2 CPU processes each, the same split, initial weights and
# batches: the same losses for 20 steps (tests/e2e/pp_gpt_python.py).
#
#   pp_python_parity.sh LOCKSTEP PP_GPT_WORKER PYTHON
set -uo pipefail
lockstep=$1 worker=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$lockstep" run --nproc-per-node 2 --standalone -- "$worker" --out "$work" --steps 20 --schedule 1f1b \
  --micro-batches 4 >"$work/cpp.out" 2>&1
status=$?
cat "$work/cpp.out"
[ "$status" -eq 0 ] || fail "the lockstep job exited with $status"
[ -s "$work/init.safetensors" ] && [ -s "$work/cpp_losses.txt" ] || fail "the lockstep job wrote no weights or losses"
"$python" "$(dirname "$0")/pp_gpt_python.py" "$work" || fail "PyTorch's run differs (above)"
