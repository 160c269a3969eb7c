#!/usr/bin/env bash
# lockstep fit vs the Python DDP peer (bench/peer/ddp_peer.py, PyTorch DDP + DataLoader) with the seeds'
# recipe: a thin wrapper of `lockstep bench peer` (MLP 784-256-128-10, Adam 1e-3 constant, batch 64 per
# rank, 2 ranks, 1 thread per rank). Prints both per-epoch times, the speed ratio (peer epoch_s / lockstep
# epoch_s, medians; goal >= 4x) and both final val_acc after EPOCHS epochs (goal: within 0.005).
#
#   bash bench/peer.sh BUILD_DIR [EPOCHS=10]
#
# The peer runs under /usr/bin/python3 (the system PyTorch), never the python3 in PATH (PYTHON overrides).
set -euo pipefail
build=${1:?usage: peer.sh BUILD_DIR [EPOCHS]}
epochs=${2:-10}
here=$(cd "$(dirname "$0")" && pwd)
# The script from this source tree, so that an edit to it counts without re-running cmake.
LOCKSTEP_PEER_SCRIPT=${LOCKSTEP_PEER_SCRIPT:-$here/peer/ddp_peer.py} \
  LOCKSTEP_PEER_PYTHON=${PYTHON:-${LOCKSTEP_PEER_PYTHON:-}} \
  exec "$build/lockstep" bench peer --epochs "$epochs"
