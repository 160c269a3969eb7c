#!/usr/bin/env bash
# W1 and the Python DDP peer on two builds of lockstep against different LibTorch versions (Debian's 1.13
# and PyPI's 2.x), in one run, so that the figures of the two can be set side by side
# (docs/benchmarks.md, "LibTorch 2.x").
#
#   bash bench/libtorch_versions.sh BUILD_A BUILD_B [ROUNDS=3] [PEER_EPOCHS=3]
#
# W1: bench/fit_w1.sh of each build (its own bare LibTorch loop, the baseline, and `lockstep fit`, 2 ranks,
# shm and gloo), one round at a time, the builds alternating, ROUNDS times. Peer: `lockstep bench peer` of
# each build (the peer runs under the python3 with that build's torch), PEER_EPOCHS epochs, alternating.
set -euo pipefail
a=${1:?usage: libtorch_versions.sh BUILD_A BUILD_B [ROUNDS] [PEER_EPOCHS]}
b=${2:?usage: libtorch_versions.sh BUILD_A BUILD_B [ROUNDS] [PEER_EPOCHS]}
rounds=${3:-3}
peer_epochs=${4:-3}
here=$(cd "$(dirname "$0")" && pwd)
torch_of() { grep -m1 -o "LibTorch [0-9.]*" <("$1/lockstep" bench peer --help); }
for build in "$a" "$b"; do echo "$build: $(torch_of "$build")"; done
for r in $(seq 1 "$rounds"); do
  for build in "$a" "$b"; do
    echo "== W1 round $r, $build ($(torch_of "$build"))"
    bash "$here/fit_w1.sh" "$build" 3 1 | sed -n '/^W1/,$p'
  done
done
for build in "$a" "$b"; do
  echo "== peer, $build ($(torch_of "$build"))"
  "$build/lockstep" bench peer --epochs "$peer_epochs"
done
