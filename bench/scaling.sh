#!/usr/bin/env bash
# Strong scaling of `lockstep fit` at 1 and 2 ranks: a thin wrapper of `lockstep bench scaling` (see its
# --help for the method: median epoch_s scaled to the whole training split, speedup, efficiency).
#
#   bash bench/scaling.sh BUILD_DIR [MODEL=mlp] [EPOCHS=3] [extra lockstep fit flags...]
#   e.g. bash bench/scaling.sh build cnn 2 --limit-train-batches 0.25
#
# THREADS (default 1) sets --threads per rank; RANKS (default "1 2") the rank counts.
set -euo pipefail
build=${1:?usage: scaling.sh BUILD_DIR [MODEL] [EPOCHS] [fit flags...]}
model=${2:-mlp}
epochs=${3:-3}
shift $(($# < 3 ? $# : 3))
ranks=${RANKS:-1 2}
exec "$build/lockstep" bench scaling --model "$model" --epochs "$epochs" --threads "${THREADS:-1}" \
  --ranks "$(echo $ranks | tr ' ' ,)" -- "$@"
