# cmake -DBINARY=... -DNAME=... -DLOG=... -DCASE_SCRIPT=... -DLABELS=... -DOUTPUT=... -P LockstepGtestCases.cmake
#   Run after each link of a lockstep_add_test binary (cmake/LockstepTargets.cmake): lists its cases
#   (--gtest_list_tests) and writes OUTPUT, a ctest include file with one entry NAME/Suite.Case per case,
#   each reading the case's verdict from LOG (tests/support/gtest_case.sh) after ctest entry NAME ran the
#   binary (the fixture NAME).
execute_process(COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0 ${BINARY} --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc ERROR_VARIABLE errors)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests failed (${rc}): ${errors}")
endif()
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
set(labels "")
if(LABELS)
  set(labels " LABELS [==[${LABELS}]==]")
endif()
set(suite "")
foreach(line IN LISTS lines)
  string(REGEX REPLACE " *#.*" "" line "${line}")
  if(line MATCHES "^  ([^ ]+)$")
    set(case "${suite}${CMAKE_MATCH_1}")
    set(test "${NAME}/${case}")
    string(APPEND content
      "add_test([==[${test}]==] /bin/sh [==[${CASE_SCRIPT}]==] [==[${LOG}]==] [==[${case}]==] [==[${NAME}]==])\n"
      "set_tests_properties([==[${test}]==] PROPERTIES FIXTURES_REQUIRED [==[${NAME}]==] SKIP_RETURN_CODE 77 "
      "TIMEOUT 30${labels})\n")
  elseif(line MATCHES "^([^ ]+\\.)$")
    set(suite "${CMAKE_MATCH_1}")
  endif()
endforeach()
file(WRITE "${OUTPUT}" "${content}")
