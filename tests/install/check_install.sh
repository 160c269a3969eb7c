#!/bin/sh
# Installs the built tree into a scratch prefix, then configures and builds a consumer project that uses
# find_package(lockstep) and links lockstep::lockstep (with only the install prefix in CMAKE_PREFIX_PATH:
# the package finds the LibTorch it was built against), and runs it: `consumer` must read its identity, and
# `ddp_consumer` under the installed `lockstep run` must train exactly like one process on 1, 2 and 3 ranks.
set -eu
build_dir=$1
source_dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
test -x "$scratch/prefix/bin/lockstep"
cmake -S "$source_dir/tests/install/consumer" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$scratch/configure.log" 2>&1 || { cat "$scratch/configure.log"; exit 1; }
grep -F "lockstep:" "$scratch/configure.log" || true
cmake --build "$scratch/build" -j2 >"$scratch/build.log" 2>&1 || { tail -40 "$scratch/build.log"; exit 1; }
out=$("$scratch/build/consumer")
echo "$out"
[ "$out" = "consumer: rank 1 of 3, precision bf16-mixed, find_unused_parameters 1" ]
for n in 1 2 3; do
  LOCKSTEP_RDZV_TIMEOUT=30 "$scratch/prefix/bin/lockstep" run --nproc-per-node "$n" --standalone -- \
    "$scratch/build/ddp_consumer" auto adam >"$scratch/run.out" 2>&1 || { cat "$scratch/run.out"; exit 1; }
  cat "$scratch/run.out"
  grep -q "^\[rank 0\] rank 0/$n [a-z]* adam: ddp == single process" "$scratch/run.out"  # auto: the backend it chose
done
echo "install_and_consume: ok"
