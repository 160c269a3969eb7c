#!/bin/bash
# ci_run_test.sh SOURCE_DIR: .ci/run stops at its first failed step. It runs a copy of .ci/run in a tree whose
# scripts and cmake/ctest are stand-ins that log each call: with `cmake --build build` failing, CI must exit
# non-zero naming that step, never run ctest or anything after it, and leave nothing of the background pip
# install running (its stand-in sleeps, and starts a child that sleeps).
set -u
src=$1
work=$(mktemp -d)
marker="ci-run-test-$$-$RANDOM"
cleanup() { pkill -f "$marker" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "ci_run_test: $*" >&2; exit 1; }

mkdir -p "$work/repo/.ci" "$work/repo/scripts" "$work/bin"
cp "$src/.ci/run" "$work/repo/.ci/run"
stub() {  # stub PATH BODY: an executable that logs its name and arguments, then runs BODY
  printf '#!/bin/bash\necho "$(basename "$0") $*" >>%q\n%s\n' "$work/calls" "$2" >"$1"
  chmod +x "$1"
}
for script in check-skips.py clang-tidy.sh; do stub "$work/repo/scripts/$script" "exit 0"; done
# The first step waits until the pip stand-in runs, so that CI fails while pip is busy (as in a real run).
stub "$work/repo/scripts/install-deps.sh" "for _ in \$(seq 100); do pgrep -f $marker >/dev/null && exit 0; sleep 0.1; done; exit 0"
stub "$work/repo/scripts/install-pip-torch.sh" "sleep 300 $marker & sleep 301 $marker"
stub "$work/bin/cmake" '[ "$1" = --build ] && exit 7; exit 0'
stub "$work/bin/ctest" "exit 0"

PATH="$work/bin:$PATH" bash "$work/repo/.ci/run" >"$work/out" 2>&1
status=$?
[ "$status" -eq 7 ] || { cat "$work/out"; fail "CI exited $status after a failed build, expected the build's 7"; }
grep -q "CI: step 'build build/' failed (exit 7); CI stops here" "$work/out" || { cat "$work/out"; fail "the failed step is not named"; }
grep -q "^ctest" "$work/calls" && { cat "$work/calls"; fail "ctest ran after the build failed"; }
grep -q "^clang-tidy.sh" "$work/calls" && { cat "$work/calls"; fail "clang-tidy ran after the build failed"; }
# The pip stand-in and its child belong to CI's process group for pip, killed at exit (allow it a moment).
for _ in $(seq 50); do pgrep -f "$marker" >/dev/null || break; sleep 0.1; done
pgrep -af "$marker" && fail "the background pip install outlived CI"
echo "ok: .ci/run stopped at the failed build, named it, and left nothing running"
