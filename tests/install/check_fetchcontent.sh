#!/bin/sh
# Builds tests/install/fetchcontent (a user's project: FetchContent_Declare(lockstep SOURCE_DIR <this tree>) +
# FetchContent_MakeAvailable, nothing before them) and checks that:
#   - it configures, and lockstep's tests, benchmarks and examples are off there (their folders were never
#     added, so none of their targets exists, and no test_* program was built);
#   - its ddp_consumer, under this build's `lockstep run` on 2 ranks, trains exactly like one process.
# Cost: only ddp_consumer is built, with the lockstep libraries it links, which compile again in the
# consumer's tree. They cannot hit the ccache entries of this build's own compiles: ccache keys on the -I
# paths to the sources relative to the object's folder, which lies deeper here (.../_deps/lockstep-build/src/
# vs build/src/). So the consumer's folder is always the same one in this build tree, and CCACHE_BASEDIR, unless
# set, is the source tree (with the build tree inside it, hits in another clone too): the next run hits its
# own entries for every unchanged source. Measured on the 2-core machine under a load of 6-7 (LibTorch 1.13):
# cold 570 s (configure 3 s, build 567 s: 27 compiles, the two PCHs and ddp_consumer included), warm 72-76 s (build 66 s, all hits).
# Usage: check_fetchcontent.sh BUILD_DIR SOURCE_DIR LOCKSTEP_CLI [-DVAR=VALUE...] (the -D's: this build's
# LibTorch and compiler, so that the consumer builds against the same).
set -eu
build_dir=$1
source_dir=$2
cli=$3
shift 3
work="$build_dir/tests/install/fetchcontent"
rm -rf "$work"
mkdir -p "$work"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$source_dir}"
start=$(date +%s)
cmake -S "$source_dir/tests/install/fetchcontent" -B "$work/build" -DCMAKE_BUILD_TYPE=Release "$@" \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
grep -F "lockstep:" "$work/configure.log" || true
for option in LOCKSTEP_BUILD_TESTS LOCKSTEP_BUILD_BENCH LOCKSTEP_BUILD_EXAMPLES; do
  grep -qx "$option:BOOL=OFF" "$work/build/CMakeCache.txt" || { echo "$option is not OFF in a subproject"; exit 1; }
done
for folder in tests bench examples; do  # never add_subdirectory'd: none of their targets exists
  [ ! -e "$work/build/_deps/lockstep-build/$folder" ] || { echo "lockstep's $folder/ is part of the consumer's build"; exit 1; }
done
configured=$(date +%s)
cmake --build "$work/build" --target ddp_consumer -j2 >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
built=$(date +%s)
echo "configure $((configured - start)) s, build $((built - configured)) s"
if find "$work/build/_deps/lockstep-build" -name CMakeFiles -prune -o -type f -name 'test_*' -perm -u+x -print | grep .; then
  echo "lockstep's test programs were built in the consumer's tree (above)"
  exit 1
fi
LOCKSTEP_RDZV_TIMEOUT=30 "$cli" run --nproc-per-node 2 --standalone -- "$work/build/ddp_consumer" auto adam \
  >"$work/run.out" 2>&1 || { cat "$work/run.out"; exit 1; }
cat "$work/run.out"
grep -q "^\[rank 0\] rank 0/2 [a-z]* adam: ddp == single process" "$work/run.out"
rm -rf "$work"
echo "fetchcontent_and_consume: ok"
