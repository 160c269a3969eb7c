#!/bin/sh
# gtest_run.sh LOG BINARY: the ctest entry that runs a GoogleTest binary once for its cases' entries
# (tests/support/gtest_case.sh). The last run's LOG goes first, so no case can read a verdict of an earlier run.
log=$1
shift
rm -f "$log"
LOCKSTEP_CASE_LOG=$log exec "$@"
