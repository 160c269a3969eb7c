#!/usr/bin/env bash
# lockstep fit vs the Python DDP peer (bench/peer/ddp_peer.py, PyTorch DDP + DataLoader) with the seeds'
# recipe: MLP 784-256-128-10, Adam 1e-3 constant, batch 64 per rank, 2 ranks, 1 thread per rank.
# Prints both per-epoch times, the speed ratio (peer epoch_s / lockstep epoch_s, medians; goal >= 4x) and
# both final val_acc after EPOCHS epochs (goal: within 0.005).
#
#   bash bench/peer.sh BUILD_DIR [EPOCHS=10]
#
# The peer runs under /usr/bin/python3 (the system PyTorch), never the python3 in PATH (PYTHON overrides).
set -euo pipefail
build=${1:?usage: peer.sh BUILD_DIR [EPOCHS]}
epochs=${2:-10}
python=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
lockstep=$build/lockstep
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { grep -o "\"$1\": *[0-9.e+-]*" | sed 's/.*: *//'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

"$lockstep" run --nproc-per-node 2 --standalone -- "$python" "$here/peer/ddp_peer.py" --epochs "$epochs" \
  --threads 1 --batch-size 64 --lr 1e-3 2>&1 | sed -n 's/^\[rank 0\] //p' | grep '^{' >"$tmp/peer.jsonl"
"$lockstep" fit --devices 2 --model mlp --optimizer adam --lr 1e-3 --batch-size 64 --lr-schedule constant \
  --threads 1 --max-epochs "$epochs" --progress off --metrics-file "$tmp/fit.jsonl" >/dev/null

paste <(field epoch_s <"$tmp/peer.jsonl") <(field val_acc <"$tmp/peer.jsonl") \
      <(field epoch_s <"$tmp/fit.jsonl") <(field val_acc <"$tmp/fit.jsonl") |
  awk 'BEGIN { print "epoch  peer epoch_s  peer val_acc  lockstep epoch_s  lockstep val_acc" }
       { printf "%5d  %12.3f  %12.4f  %16.3f  %16.4f\n", NR, $1, $2, $3, $4 }'
peer_t=$(field epoch_s <"$tmp/peer.jsonl" | median)
fit_t=$(field epoch_s <"$tmp/fit.jsonl" | median)
peer_acc=$(field val_acc <"$tmp/peer.jsonl" | tail -1)
fit_acc=$(field val_acc <"$tmp/fit.jsonl" | tail -1)
printf '\nmedian epoch_s: peer %.3f s, lockstep %.3f s; speed ratio peer/lockstep = %.2fx (goal >= 4x)\n' \
  "$peer_t" "$fit_t" "$(awk -v p="$peer_t" -v f="$fit_t" 'BEGIN { print p / f }')"
printf 'final val_acc after %d epochs: peer %.4f, lockstep %.4f, |diff| = %.4f (goal <= 0.005)\n' "$epochs" \
  "$peer_acc" "$fit_acc" "$(awk -v p="$peer_acc" -v f="$fit_acc" 'BEGIN { d = p - f; print d < 0 ? -d : d }')"
