# Helpers shared by every layer's CMakeLists.
set(LOCKSTEP_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}")

# lockstep_add_layer(NAME SOURCES... [TORCH | TORCH_NN] [DEPS ...])
#   A static library lockstep_<NAME> with the public include dir and warnings. TORCH links LibTorch with
#   the core precompiled header (tensors, process groups); TORCH_NN with the full one, for layers that
#   also use torch::nn or torch::optim (see lockstep_use_torch).
function(lockstep_add_layer name)
  cmake_parse_arguments(ARG "TORCH;TORCH_NN" "" "SOURCES;DEPS" ${ARGN})
  set(target lockstep_${name})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(lockstep::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_17)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Winvalid-pch)
  target_link_libraries(${target} PUBLIC ${ARG_DEPS} Threads::Threads)
  if(ARG_TORCH_NN)
    lockstep_use_torch(${target} NN)
  elseif(ARG_TORCH)
    lockstep_use_torch(${target})
  endif()
  set_property(GLOBAL APPEND PROPERTY LOCKSTEP_LAYERS ${target})
endfunction()

# lockstep_use_gloo_headers(TARGET PUBLIC|PRIVATE)
#   With LOCKSTEP_WITH_GLOO (cmake/LockstepTorch.cmake), what c10d's ProcessGroupGloo.hpp needs: USE_C10D_GLOO
#   and gloo's headers, and LOCKSTEP_WITH_GLOO for the precompiled header (USE_C10D_GLOO alone is no sign of
#   the headers: PyPI's torch defines it in its own targets). Build-tree only: lockstep's installed headers
#   never include ProcessGroupGloo.hpp, so a user's project needs no gloo headers.
function(lockstep_use_gloo_headers target scope)
  if(LOCKSTEP_WITH_GLOO)
    target_compile_definitions(${target} ${scope} $<BUILD_INTERFACE:USE_C10D_GLOO> $<BUILD_INTERFACE:LOCKSTEP_WITH_GLOO>)
    target_include_directories(${target} SYSTEM ${scope} $<BUILD_INTERFACE:${LOCKSTEP_GLOO_INCLUDE_DIR}>)
  endif()
endfunction()

# lockstep_use_torch(TARGET [NN])
#   Links LibTorch (and c10d's Gloo) into TARGET and reuses one of two precompiled headers: by default
#   the core one (cmake/torch_pch.h: ATen and c10d, i.e. tensors, stores and process groups), with NN the
#   full one (cmake/torch_nn_pch.h: also torch/nn.h and torch/optim.h). A PCH saves parsing, not
#   instantiating: gcc instantiates again, in every translation unit, the templates that the PCH's inline
#   functions use. Measured here (empty translation unit, gcc 12): ~3 s for the core PCH, ~11 s for the
#   full one. Targets that need no modules or optimizers therefore take the core one.
function(lockstep_use_torch target)
  cmake_parse_arguments(ARG "NN" "" "" ${ARGN})
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  target_include_directories(${target} SYSTEM PUBLIC ${TORCH_INCLUDE_DIRS})
  target_compile_definitions(${target} PUBLIC LOCKSTEP_TORCH_MAJOR=${LOCKSTEP_TORCH_MAJOR}
                                              LOCKSTEP_TORCH_MINOR=${LOCKSTEP_TORCH_MINOR})
  lockstep_use_gloo_headers(${target} PUBLIC)
  if(ARG_NN)
    set(pch lockstep_torch_nn_pch)
    set(header torch_nn_pch.h)
  else()
    set(pch lockstep_torch_pch)
    set(header torch_pch.h)
  endif()
  if(NOT TARGET ${pch})
    # A tiny object library that owns the PCH; everyone else REUSE_FROMs it.
    add_library(${pch} OBJECT ${LOCKSTEP_CMAKE_DIR}/pch_anchor.cpp)
    set_target_properties(${pch} PROPERTIES UNITY_BUILD OFF)
    target_link_libraries(${pch} PRIVATE ${TORCH_LIBRARIES})
    target_include_directories(${pch} SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
    target_compile_definitions(${pch} PRIVATE LOCKSTEP_TORCH_MAJOR=${LOCKSTEP_TORCH_MAJOR}
                                              LOCKSTEP_TORCH_MINOR=${LOCKSTEP_TORCH_MINOR})
    lockstep_use_gloo_headers(${pch} PRIVATE)
    target_compile_features(${pch} PRIVATE cxx_std_17)
    target_precompile_headers(${pch} PRIVATE ${LOCKSTEP_CMAKE_DIR}/${header})
  endif()
  target_precompile_headers(${target} REUSE_FROM ${pch})
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    # The PCH is built -fPIC (it also serves the libraries); an executable's default -fPIE would make
    # gcc reject it, so executables that reuse it compile -fPIC too (still linked as PIE).
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
endfunction()

# lockstep_add_test(NAME SOURCES... [LIBS ...] [TORCH | TORCH_NN] [TIMEOUT S] [LABELS L...])
#   A GoogleTest executable registered with ctest as the entry NAME, which runs it once, and one entry
#   NAME/Suite.Case per case, which reports that case: passed, failed (with its failures' lines), skipped
#   (exit 77, its reason in a line "lockstep-skip: Suite.Case: reason") or never ended (a crash or a hang).
#   One process for all cases: every process start loads LibTorch (~0.5 s), which for ~700 cases would cost
#   ~6 minutes per suite. How: tests/support/gtest_main.cpp writes each case's start and end to a log,
#   tests/support/gtest_case.sh reads it; after each link, cmake/LockstepGtestCases.cmake lists the cases.
#   TIMEOUT (default 120 s) bounds the binary's run. It only catches hangs: keep it several times what the
#   binary takes on a busy 2-core machine (the slowest, test_comm, takes ~35 s there and has 180).
function(lockstep_add_test name)
  cmake_parse_arguments(ARG "TORCH;TORCH_NN" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest lockstep_gtest_main Threads::Threads)
  target_compile_options(${name} PRIVATE -Wall -Wextra)
  if(ARG_TORCH_NN)
    lockstep_use_torch(${name} NN)
  elseif(ARG_TORCH)
    lockstep_use_torch(${name})
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set(log ${CMAKE_CURRENT_BINARY_DIR}/${name}.cases.log)
  set(cases ${CMAKE_CURRENT_BINARY_DIR}/${name}.cases.cmake)
  add_test(NAME ${name} COMMAND ${PROJECT_SOURCE_DIR}/tests/support/gtest_run.sh ${log} $<TARGET_FILE:${name}>)
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} FIXTURES_SETUP ${name} LABELS "${ARG_LABELS}")
  add_custom_command(TARGET ${name} POST_BUILD VERBATIM
    COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:${name}> -DNAME=${name} -DLOG=${log}
            -DCASE_SCRIPT=${PROJECT_SOURCE_DIR}/tests/support/gtest_case.sh "-DLABELS=${ARG_LABELS}"
            -DOUTPUT=${cases} -P ${LOCKSTEP_CMAKE_DIR}/LockstepGtestCases.cmake)
  # ctest reads the cases' entries when the binary has been built; before, one failing entry says so.
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/${name}.include.cmake
    "if(EXISTS [==[${cases}]==])\n  include([==[${cases}]==])\nelse()\n"
    "  add_test([==[${name}/NOT_BUILT]==] ${CMAKE_COMMAND} -E echo [==[${name} is not built: build it first]==])\n"
    "  set_tests_properties([==[${name}/NOT_BUILT]==] PROPERTIES WILL_FAIL TRUE)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${CMAKE_CURRENT_BINARY_DIR}/${name}.include.cmake)
  # Tests find the CLI and the trees through LOCKSTEP_BIN / LOCKSTEP_SOURCE_DIR / LOCKSTEP_BUILD_DIR, and
  # the python3 with the same torch through LOCKSTEP_PYTHON (cmake/LockstepTorch.cmake), which ctest checks
  # before it runs anything: a pip install can put another torch into that python3 after configuring.
  get_property(env_file_done GLOBAL PROPERTY LOCKSTEP_TEST_ENV_FILE)
  if(NOT env_file_done)
    set_property(GLOBAL PROPERTY LOCKSTEP_TEST_ENV_FILE ON)
    file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/lockstep_test_env.cmake CONTENT
      "set(ENV{LOCKSTEP_BIN} [==[$<TARGET_FILE:lockstep_cli>]==])\nset(ENV{LOCKSTEP_SOURCE_DIR} [==[${PROJECT_SOURCE_DIR}]==])\nset(ENV{LOCKSTEP_BUILD_DIR} [==[${PROJECT_BINARY_DIR}]==])\nset(ENV{LOCKSTEP_PYTHON} [==[${LOCKSTEP_PYTHON}]==])\nset(LOCKSTEP_PYTHON [==[${LOCKSTEP_PYTHON}]==])\nset(LOCKSTEP_TORCH_VERSION [==[${LOCKSTEP_TORCH_VERSION}]==])\ninclude([==[${LOCKSTEP_CMAKE_DIR}/LockstepCheckPython.cmake]==])\n")
  endif()
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${PROJECT_BINARY_DIR}/lockstep_test_env.cmake)
endfunction()

# lockstep_share_imported_targets(TARGET...)
#   Makes every imported target that TARGETs link, directly or through other targets, visible to the whole
#   build (IMPORTED_GLOBAL). Needed when lockstep is a subproject (add_subdirectory, FetchContent): find_package
#   creates imported targets in the calling directory only (lockstep's), while a user's `app` that links
#   lockstep::lockstep resolves its link interface from its own directory, e.g. Caffe2's
#   $<TARGET_FILE:torch_cpu> ("Target "torch_cpu" not found"). Promoting exactly that closure, rather than
#   asking users to find_package(Torch) first or making every found package global (CMake 3.24's
#   CMAKE_FIND_PACKAGE_TARGETS_GLOBAL; the minimum here is 3.18), leaves the user's own find_package calls of
#   other packages untouched; a user's later find_package(Torch) finds the same targets defined and keeps them
#   (Caffe2Targets.cmake returns early). Names are found in the link interface's generator expressions too
#   ($<TARGET_FILE:...>, $<LINK_ONLY:...>): any word of an item that names an imported target counts.
#   Call it in the directory whose find_package calls made the targets (lockstep's top-level CMakeLists:
#   CMake sets IMPORTED_GLOBAL only there), after the TARGETs' links are final.
function(lockstep_share_imported_targets)
  set(pending ${ARGN})
  set(seen)
  while(pending)
    list(POP_FRONT pending target)
    get_target_property(aliased ${target} ALIASED_TARGET)
    if(aliased)
      set(target ${aliased})
    endif()
    if(target IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${target})
    get_target_property(imported ${target} IMPORTED)
    get_target_property(type ${target} TYPE)
    set(links)
    if(imported)
      # One made in a directory above (the user's find_package(Torch) before lockstep's) is visible to the
      # user already, and CMake promotes a target only in the directory that made it. (CMake 3.18 lets no
      # INTERFACE library be asked its BINARY_DIR: there, those count as made here.)
      get_target_property(global ${target} IMPORTED_GLOBAL)
      set(made_in "${CMAKE_CURRENT_BINARY_DIR}")
      if(NOT type STREQUAL "INTERFACE_LIBRARY" OR NOT CMAKE_VERSION VERSION_LESS 3.19)
        get_target_property(made_in ${target} BINARY_DIR)
      endif()
      if(NOT global AND made_in STREQUAL CMAKE_CURRENT_BINARY_DIR)
        set_target_properties(${target} PROPERTIES IMPORTED_GLOBAL TRUE)
      endif()
    endif()
    if(imported AND NOT type STREQUAL "INTERFACE_LIBRARY")
      # The shared libraries an imported one needs at link time (ld's -rpath-link), per configuration.
      # (CMake 3.18 allows INTERFACE libraries no IMPORTED_CONFIGURATIONS.)
      get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
      if(NOT configs)
        set(configs)
      endif()
      foreach(config "" ${configs})
        if(config)
          string(TOUPPER "_${config}" config)
        endif()
        get_target_property(dependent ${target} IMPORTED_LINK_DEPENDENT_LIBRARIES${config})
        if(dependent)
          list(APPEND links ${dependent})
        endif()
      endforeach()
    endif()
    get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
    if(interface)
      list(APPEND links ${interface})
    endif()
    string(REGEX MATCHALL "[A-Za-z0-9_.+-]+(::[A-Za-z0-9_.+-]+)*" words "${links}")
    foreach(word IN LISTS words)
      if(TARGET ${word} AND NOT word IN_LIST seen)
        list(APPEND pending ${word})
      endif()
    endforeach()
  endwhile()
endfunction()
