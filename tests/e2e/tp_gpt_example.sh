#!/usr/bin/env bash
# examples/tp_gpt.cpp as its user runs it: 2 data x 2 tensor parallel ranks under `lockstep run` on the
# fortunes text; it must beat the unigram baseline, and its whole model (one safetensors file) must hold
# models::Gpt's parameters under their names and full shapes.
#
#   tp_gpt_example.sh LOCKSTEP TP_GPT PYTHON
set -uo pipefail
lockstep=$1 example=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$lockstep" run --nproc-per-node 4 --standalone -- "$example" --tensor-parallel 2 --steps 150 --eval-every 50 \
  --width 128 --out "$work/model.safetensors" >"$work/out" 2>&1
status=$?
cat "$work/out"
[ "$status" -eq 0 ] || fail "the job exited with $status"
line=$(grep -o 'tp_gpt quality: val_perplexity [0-9.]* baseline [0-9.]*' "$work/out") || fail "no quality line"
read -r perplexity baseline < <(echo "$line" | awk '{ print $4, $6 }')
awk -v p="$perplexity" -v b="$baseline" 'BEGIN { exit !(p < 0.8 * b) }' ||
  fail "val_perplexity $perplexity is not below 0.8 x the unigram baseline $baseline"
"$python" - "$work/model.safetensors" "$(cd "$(dirname "$0")" && pwd)" <<'PY' || fail "the whole model is not Gpt's"
import sys
sys.path.insert(0, sys.argv[2])
from check_safetensors import read_safetensors
arrays, _, _ = read_safetensors(sys.argv[1])
want = {"wte.weight": (256, 128), "wpe.weight": (64, 128), "blocks.0.attn.c_attn.weight": (384, 128),
        "blocks.1.mlp.c_proj.weight": (128, 512), "blocks.1.mlp.c_proj.bias": (128,), "ln_f.weight": (128,)}
for name, shape in want.items():
    assert tuple(arrays[name].shape) == shape, f"{name}: {arrays[name].shape}, want {shape}"
assert len(arrays) == 2 + 2 * 12 + 2, f"{len(arrays)} tensors, want 28"
print(f"tp_gpt_example: the whole model holds Gpt's {len(arrays)} tensors")
PY
echo "tp_gpt_example: ok (val_perplexity $perplexity, baseline $baseline)"
