#!/bin/sh
# Installs the built tree into a scratch prefix, then configures, builds and runs a consumer project
# that uses find_package(lockstep) and links lockstep::lockstep.
set -eu
build_dir=$1
source_dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
test -x "$scratch/prefix/bin/lockstep"
cmake -S "$source_dir/tests/install/consumer" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/build" >/dev/null
out=$("$scratch/build/consumer")
echo "$out"
[ "$out" = "consumer: rank 1 of 3" ]
