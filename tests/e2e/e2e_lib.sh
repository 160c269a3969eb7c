# Helpers shared by the e2e scripts (sourced). The script sets $work (a scratch directory) and defines
# fail MESSAGE (prints and exits 1) before sourcing this file.

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
