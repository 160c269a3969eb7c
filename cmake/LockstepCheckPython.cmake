# Included by ctest (lockstep_test_env.cmake, cmake/LockstepTargets.cmake) before any test runs, with
# LOCKSTEP_PYTHON and LOCKSTEP_TORCH_VERSION as configured: stops ctest when that python3's torch is no longer
# the LibTorch this build uses (a pip install after configuring can put another torch into it), since the
# tests that compare with PyTorch would then compare with another version. Once per ctest run.
if(LOCKSTEP_PYTHON AND NOT DEFINED ENV{LOCKSTEP_PYTHON_CHECKED})
  set(ENV{LOCKSTEP_PYTHON_CHECKED} 1)
  execute_process(COMMAND "${LOCKSTEP_PYTHON}" -c "import torch; print(torch.__version__)"
                  OUTPUT_VARIABLE _lockstep_python_torch RESULT_VARIABLE _lockstep_rc ERROR_QUIET
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _lockstep_want "${LOCKSTEP_TORCH_VERSION}")
  if(NOT _lockstep_rc EQUAL 0 OR NOT _lockstep_python_torch MATCHES "^${_lockstep_want}\\.")
    message(FATAL_ERROR "LOCKSTEP_PYTHON=${LOCKSTEP_PYTHON} imports torch '${_lockstep_python_torch}' now, but this "
      "build uses LibTorch ${LOCKSTEP_TORCH_VERSION}: the tests would compare with another PyTorch. Install "
      "another torch outside that python3 (scripts/install-pip-torch.sh uses a venv), or reconfigure with "
      "-DLOCKSTEP_PYTHON=PATH naming a python3 whose torch is ${_lockstep_want}.")
  endif()
endif()
