# Helpers shared by the e2e scripts (sourced). The script sets $work (a scratch directory) and defines
# fail MESSAGE (prints and exits 1) before sourcing this file.

# wait_for FILE TEXT: until FILE holds TEXT; fails after WAIT_FOR_S seconds (default 180: a hang bound only).
wait_for() {
  local bound=${WAIT_FOR_S:-180}
  local deadline=$((SECONDS + bound))
  until grep -Fq -- "$2" "$1" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "no '$2' in $1 within $bound s"
    sleep 0.05
  done
}

# expect_failure STATUS PATTERN -- CMD...: CMD must exit with STATUS and print PATTERN on stderr.
expect_failure() {
  local want=$1 pattern=$2
  shift 3
  "$@" >"$work/out" 2>"$work/err"
  local status=$?
  cat "$work/out" "$work/err"
  [ "$status" -eq "$want" ] || fail "exit status $status, expected $want: $*"
  grep -Fq -- "$pattern" "$work/err" || fail "stderr lacks '$pattern': $*"
}

# same_final PYTHON WORLD REFERENCE METRICS: the last epoch records of two --metrics-file files agree
# (same epoch, both with world size WORLD; train_loss, val_loss and val_acc to float tolerance).
same_final() {
  "$1" - "$2" "$3" "$4" <<'PY' || fail "final metrics differ from the reference"
import json, sys
def last(path):
    epochs = [json.loads(l) for l in open(path) if '"batch"' not in l]
    assert epochs, f"{path}: no epoch record"
    return max(epochs, key=lambda r: r["epoch"])
world, ref, got = int(sys.argv[1]), last(sys.argv[2]), last(sys.argv[3])
assert got["epoch"] == ref["epoch"], f"last epoch {got['epoch']}, reference {ref['epoch']}"
assert got["world_size"] == ref["world_size"] == world, (got["world_size"], ref["world_size"], world)
for key in ("train_loss", "val_loss", "val_acc"):
    assert abs(got[key] - ref[key]) <= 1e-5 * max(1.0, abs(ref[key])), f"{key}: {got[key]} vs reference {ref[key]}"
print(f"same final metrics as the reference: epoch {got['epoch']}, " +
      ", ".join(f"{k} {got[k]:.6f}" for k in ("train_loss", "val_loss", "val_acc")))
PY
}

# start_or_skip TEST WHAT CMD...: runs CMD, a script that starts what the test needs and exits 3 with the
# reason on stdout where this machine cannot (not root, no CAP_NET_ADMIN, packages missing). Then the test
# is skipped (exit 77, ctest's SKIP_RETURN_CODE) with the reason; any other failure fails it, naming WHAT.
start_or_skip() {
  local test=$1 what=$2
  shift 2
  "$@" >"$work/start.out" 2>&1
  local status=$?
  if [ "$status" -eq 3 ]; then
    echo "lockstep-skip: $test: $(cat "$work/start.out")"
    exit 77
  fi
  [ "$status" -eq 0 ] || { cat "$work/start.out"; fail "$what did not start"; }
}
