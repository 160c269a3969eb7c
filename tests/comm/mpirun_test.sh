#!/bin/sh
# mpirun_test.sh N PROGRAM [ARGS...]: runs PROGRAM as N MPI ranks on this host, for ctest. Exit status:
# mpirun's (non-zero when any rank fails), or 77 (ctest's SKIP_RETURN_CODE) when mpirun is not installed.
# --allow-run-as-root: CI runs as root, which Open MPI refuses otherwise; --oversubscribe: more ranks than
# cores (the CI machines have 2).
set -eu
n=$1
shift
if ! mpirun=$(command -v mpirun); then
  echo "lockstep-skip: mpirun_test[$(basename "$1")]: mpirun not found (Debian: apt-get install openmpi-bin, or scripts/install-deps.sh)"
  exit 77
fi
exec "$mpirun" --allow-run-as-root --oversubscribe -np "$n" "$@"
