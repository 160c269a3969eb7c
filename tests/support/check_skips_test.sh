#!/bin/bash
# check_skips_test.sh SKIP_DEMO SOURCE_DIR: the skip and case machinery itself.
# 1. lockstep's gtest main run by hand: a binary with a skipped test exits 77 and prints
#    "lockstep-skip: Suite.Name: reason"; the same binary with the skip filtered out exits 0.
# 2. Under ctest (gtest_run.sh, gtest_case.sh): each case's entry reports pass, skip (77 and the line),
#    failure (with the assertion's file:line), a crash (the case that was running, and the cases after it
#    as never run); a binary that did not start leaves no earlier run's log to read.
# 3. scripts/check-skips.py over a real ctest run's JUnit file: passes with allowed skips only; fails, naming
#    the entry, on a skip not allowed, one allowed for the other LibTorch build, a skip without its line, a
#    skip line in an entry that passed, and an entry that did not run because its fixture failed.
set -u
demo=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_skips_test: $*" >&2; exit 1; }
expect() {  # expect STATUS PATTERN CMD...: CMD exits STATUS and its output has a line matching PATTERN
  local want=$1 pattern=$2 status
  shift 2
  "$@" >"$work/out" 2>&1
  status=$?
  [ "$status" -eq "$want" ] || { cat "$work/out"; fail "'$*' exited $status, expected $want"; }
  grep -q -- "$pattern" "$work/out" || { cat "$work/out"; fail "'$*' printed no line matching '$pattern'"; }
}

# 1. By hand.
expect 77 "^lockstep-skip: SkipDemo.Skips: the demo's reason$" "$demo"
"$demo" --gtest_filter=-SkipDemo.Skips >"$work/out" 2>&1 || { cat "$work/out"; fail "without the skip it did not pass"; }
grep -q "lockstep-skip" "$work/out" && fail "a skip line without a skip"

# 2. Under ctest: one run, one entry per case.
log=$work/demo.cases.log
run=$src/tests/support/gtest_run.sh
case_entry=$src/tests/support/gtest_case.sh
LOCKSTEP_DEMO_FAIL=1 "$run" "$log" "$demo" >"$work/out" 2>&1 || { cat "$work/out"; fail "a run whose cases all ended did not exit 0"; }
expect 0 "SkipDemo.Passes: passed" "$case_entry" "$log" SkipDemo.Passes demo
expect 77 "^lockstep-skip: SkipDemo.Skips: the demo's reason$" "$case_entry" "$log" SkipDemo.Skips demo
expect 1 "skip_demo.cpp:[0-9]*: .*asked to fail" "$case_entry" "$log" SkipDemo.FailsWhenAsked demo
expect 1 "did not run" "$case_entry" "$log" SkipDemo.NoSuchCase demo
LOCKSTEP_DEMO_CRASH=1 "$run" "$log" "$demo" >"$work/out" 2>&1 && { cat "$work/out"; fail "a crashed run exited 0"; }
expect 0 "passed" "$case_entry" "$log" SkipDemo.Passes demo
expect 1 "was running when demo ended" "$case_entry" "$log" SkipDemo.CrashesWhenAsked demo
expect 1 "SkipDemo.PassesLast: did not run" "$case_entry" "$log" SkipDemo.PassesLast demo
"$run" "$log" "$work/no-such-binary" >/dev/null 2>&1 && fail "a binary that does not exist ran"
expect 1 "wrote no case log" "$case_entry" "$log" SkipDemo.Passes demo

# 3. check-skips.py over a ctest run of a small project (CMake's own JUnit writer): entries named as
#    tests/allowed-skips.txt names them, and one of the 1.13-only entries.
project() {  # project TORCH_VERSION ENTRY_COMMANDS...: a configured project whose entries run the commands
  local version=$1 n=0
  shift
  rm -rf "$work/p" && mkdir -p "$work/p"
  {
    echo 'cmake_minimum_required(VERSION 3.18)'
    echo 'project(p NONE)'
    echo 'enable_testing()'
    for command in "$@"; do
      n=$((n + 1))
      echo "add_test(NAME ${command%%=*} COMMAND sh -c [==[${command#*=}]==])"
      echo "set_tests_properties(${command%%=*} PROPERTIES SKIP_RETURN_CODE 77)"
    done
  } >"$work/p/CMakeLists.txt"
  cmake -S "$work/p" -B "$work/p/build" >/dev/null || fail "cmake failed"
  echo "set(LOCKSTEP_TORCH_VERSION [==[$version]==])" >"$work/p/build/lockstep_test_env.cmake"
  ctest --test-dir "$work/p/build" --output-junit ctest-junit.xml >/dev/null 2>&1
}
gpu_skip='test_comm/Backends.NcclWithoutAGpuSaysWhatToUse=echo "lockstep-skip: Backends.NcclWithoutAGpuSaysWhatToUse: this machine has a GPU: x"; exit 77'
adam_skip='test_optim/AtenFusedAdam.EqualsTorchAdamAndAdamWToFloatRounding=echo "lockstep-skip: AtenFusedAdam.EqualsTorchAdamAndAdamWToFloatRounding: LibTorch 1.13.0 has none"; exit 77'
check=$src/scripts/check-skips.py
project 2.15.0 "pass=echo ok" "$gpu_skip"
expect 0 "allowed     test_comm/Backends.NcclWithoutAGpuSaysWhatToUse" "$check" "$work/p/build"
project 1.13.0 "pass=echo ok" "$adam_skip"
expect 0 "allowed     test_optim/AtenFusedAdam" "$check" "$work/p/build"
project 2.15.0 "$adam_skip"
expect 1 "test_optim/AtenFusedAdam.EqualsTorchAdamAndAdamWToFloatRounding: a skip that .* does not allow for build 2.x" \
  "$check" "$work/p/build"
project 1.13.0 'e2e_x=echo "lockstep-skip: slurm_e2e[ddp]: slurmd is not installed"; exit 77'
expect 1 "NOT ALLOWED e2e_x  slurm_e2e\[ddp\]: slurmd is not installed" "$check" "$work/p/build"
project 1.13.0 "e2e_quiet=exit 77"
expect 1 "e2e_quiet: exited 77 (skipped) without a line" "$check" "$work/p/build"
project 1.13.0 'e2e_loud=echo "lockstep-skip: e2e_loud: a reason"; exit 0'
expect 1 "e2e_loud: printed a skip line .* but ctest counted it" "$check" "$work/p/build"
{
  echo 'set_tests_properties(pass PROPERTIES FIXTURES_SETUP f)'
  echo 'set_tests_properties(needs PROPERTIES FIXTURES_REQUIRED f)'
} >"$work/fixture.cmake"
project 1.13.0 "pass=exit 1" "needs=echo ok"
echo "include($work/fixture.cmake)" >>"$work/p/CMakeLists.txt"
cmake -S "$work/p" -B "$work/p/build" >/dev/null && ctest --test-dir "$work/p/build" --output-junit ctest-junit.xml >/dev/null 2>&1
expect 1 "needs: did not run (Fixture dependency failed)" "$check" "$work/p/build"
echo "ok: cases report pass, skip, failure and crash; check-skips reconciles ctest's list with the skip lines per build"
