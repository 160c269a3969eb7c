# LibTorch for lockstep: find_package(Torch) made safe where two LibTorch installs meet, and the headers c10d
# needs that LibTorch 2.x does not ship. Used by lockstep's build and by the installed lockstepConfig.cmake, so
# that a user's find_package(lockstep) resolves LibTorch the same way.

# lockstep_find_torch()
#   find_package(Torch REQUIRED), then:
#   - Libraries from one install only. TorchConfig.cmake finds c10 (and the library it reports as "Found
#     Torch") with find_library(... PATHS <prefix>/lib), which searches the system's directories first: with
#     Debian's libtorch-dev installed and CMAKE_PREFIX_PATH naming a pip torch, c10 came from /usr/lib, and
#     one process would load two LibTorch versions. Libraries that lie outside TORCH_INSTALL_PREFIX are
#     replaced by the install's library of the same name where it has one, else by the torch wheels' copy
#     (the CUDA toolkit's: lockstep_use_wheel_cuda_libraries). A Caffe2 config from another install is a
#     FATAL_ERROR.
#   - -DLOCKSTEP_REQUIRE_TORCH_VERSION=X.Y.Z: any other LibTorch is a FATAL_ERROR (CI's second build).
#   - LOCKSTEP_TORCH_VERSION: MAJOR.MINOR.PATCH of the LibTorch found (Debian's 1.13.1 reports 1.13.0), and
#     LOCKSTEP_TORCH_MAJOR / _MINOR (lockstep_use_torch passes them on, c10d_compat.h checks the headers).
#   In an installed lockstepConfig.cmake, LOCKSTEP_BUILT_WITH_TORCH_DIR and _VERSION name the LibTorch that
#   lockstep was built against: it is searched after CMAKE_PREFIX_PATH, and any other version is an error
#   (its C++ ABI differs).
macro(lockstep_find_torch)
  lockstep_pin_caffe2_dir()
  find_package(Torch REQUIRED HINTS ${LOCKSTEP_BUILT_WITH_TORCH_DIR})
  set(LOCKSTEP_TORCH_VERSION "${Torch_VERSION}")
  string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _lockstep_torch_mm "${Torch_VERSION}")
  set(LOCKSTEP_TORCH_MAJOR "${CMAKE_MATCH_1}")
  set(LOCKSTEP_TORCH_MINOR "${CMAKE_MATCH_2}")
  get_filename_component(_lockstep_caffe2_beside "${Torch_DIR}/../Caffe2" REALPATH)
  get_filename_component(_lockstep_caffe2_used "${Caffe2_DIR}" REALPATH)
  if(EXISTS "${_lockstep_caffe2_beside}/Caffe2Config.cmake" AND NOT _lockstep_caffe2_used STREQUAL _lockstep_caffe2_beside)
    message(FATAL_ERROR "LibTorch's TorchConfig.cmake (${Torch_DIR}) loaded the Caffe2 of another install "
      "(${Caffe2_DIR}): two LibTorch versions would be mixed. Configure with -DTorch_DIR=${Torch_DIR} "
      "-DCaffe2_DIR=${_lockstep_caffe2_beside} in a fresh build folder.")
  endif()
  if(LOCKSTEP_REQUIRE_TORCH_VERSION AND NOT Torch_VERSION VERSION_EQUAL LOCKSTEP_REQUIRE_TORCH_VERSION)
    message(FATAL_ERROR "lockstep: LOCKSTEP_REQUIRE_TORCH_VERSION=${LOCKSTEP_REQUIRE_TORCH_VERSION}, but the LibTorch "
      "found is ${Torch_VERSION} (${Torch_DIR}). Point CMAKE_PREFIX_PATH at that LibTorch (a pip torch: "
      "python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') in a fresh build folder.")
  endif()
  if(NOT Torch_VERSION MATCHES "^(1\\.13|2\\.15)\\.")
    message(WARNING "lockstep: LibTorch ${Torch_VERSION} is untested (CI builds and tests 1.13 and 2.15); "
                    "a build error or a failing test here is worth an issue.")
  endif()
  if(LOCKSTEP_BUILT_WITH_TORCH_VERSION AND NOT Torch_VERSION VERSION_EQUAL LOCKSTEP_BUILT_WITH_TORCH_VERSION)
    message(FATAL_ERROR
      "lockstep was built against LibTorch ${LOCKSTEP_BUILT_WITH_TORCH_VERSION} (${LOCKSTEP_BUILT_WITH_TORCH_DIR}), "
      "but this project found LibTorch ${Torch_VERSION} (${Torch_DIR}). Point CMAKE_PREFIX_PATH (or Torch_DIR) "
      "at the same LibTorch, or rebuild lockstep against this one.")
  endif()
  get_filename_component(_lockstep_torch_prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
  get_filename_component(_lockstep_wheels "${_lockstep_torch_prefix}/../nvidia" REALPATH)
  file(GLOB _lockstep_wheel_dirs LIST_DIRECTORIES true "${_lockstep_wheels}/*/lib")
  set(_lockstep_torch_libraries)
  foreach(_lockstep_lib IN LISTS TORCH_LIBRARIES)
    lockstep_library_of_this_torch("${_lockstep_lib}" _lockstep_lib)
    list(APPEND _lockstep_torch_libraries "${_lockstep_lib}")
  endforeach()
  set(TORCH_LIBRARIES ${_lockstep_torch_libraries})
  if(_lockstep_wheel_dirs)
    lockstep_use_wheel_cuda_libraries()
  endif()
endmacro()

# lockstep_library_of_this_torch(LIBRARY OUT): OUT = LIBRARY where it lies inside TORCH_INSTALL_PREFIX (or is no
# file path); else the install's own library of that name (the system-directory case above), else the torch
# wheels' lib<name>.so.<major> (lockstep_use_wheel_cuda_libraries), else LIBRARY unchanged.
function(lockstep_library_of_this_torch library out)
  set(result "${library}")
  get_filename_component(name "${library}" NAME)
  get_filename_component(real "${library}" REALPATH)
  string(FIND "${real}" "${_lockstep_torch_prefix}/" in_torch)
  string(FIND "${real}" "${_lockstep_wheels}/" in_wheels)
  if(library MATCHES "^/" AND EXISTS "${library}" AND NOT in_torch EQUAL 0 AND NOT in_wheels EQUAL 0)
    if(EXISTS "${_lockstep_torch_prefix}/lib/${name}")
      set(result "${_lockstep_torch_prefix}/lib/${name}")
      message(STATUS "lockstep: TorchConfig picked ${library} from outside ${_lockstep_torch_prefix} "
                     "(another LibTorch is installed there); using ${result}")
    elseif(name MATCHES "^(lib[^.]+\\.so)")
      set(stem "${CMAKE_MATCH_1}")
      foreach(dir IN LISTS _lockstep_wheel_dirs)
        file(GLOB copies "${dir}/${stem}.[0-9]*")
        foreach(copy IN LISTS copies)
          if(copy MATCHES "\\.so\\.[0-9]+$")
            message(STATUS "lockstep: linking ${copy} (the torch wheel's) instead of ${library}")
            set(result "${copy}")
          endif()
        endforeach()
      endforeach()
    endif()
  endif()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# lockstep_pin_caffe2_dir()
#   TorchConfig.cmake loads its sibling Caffe2Config.cmake with find_dependency(Caffe2 PATHS <sibling>), and
#   PATHS come after the system's prefixes: with Debian's libtorch-dev installed, a pip torch's TorchConfig
#   loaded Debian's 1.13 Caffe2 (its libtorch_cpu, its headers' targets) whenever CMAKE_PREFIX_PATH did not
#   name the pip torch's cmake folder itself (a user's project finding lockstep, say). So: locate the
#   TorchConfig.cmake that find_package(Torch) will take (Torch_DIR, else the first in CMAKE_PREFIX_PATH,
#   else the LibTorch lockstep was built against) and pin Caffe2_DIR to the Caffe2 beside it.
function(lockstep_pin_caffe2_dir)
  set(torch_dir "${Torch_DIR}")
  if(NOT torch_dir OR NOT EXISTS "${torch_dir}/TorchConfig.cmake")
    set(torch_dir "")
    set(env_prefixes "$ENV{CMAKE_PREFIX_PATH}")
    string(REPLACE ":" ";" env_prefixes "${env_prefixes}")
    foreach(prefix IN LISTS CMAKE_PREFIX_PATH env_prefixes LOCKSTEP_BUILT_WITH_TORCH_DIR)
      foreach(dir "${prefix}" "${prefix}/Torch" "${prefix}/share/cmake/Torch" "${prefix}/lib/cmake/Torch")
        if(NOT torch_dir AND prefix AND EXISTS "${dir}/TorchConfig.cmake")
          set(torch_dir "${dir}")
        endif()
      endforeach()
    endforeach()
  endif()
  if(torch_dir AND EXISTS "${torch_dir}/../Caffe2/Caffe2Config.cmake")
    get_filename_component(caffe2_dir "${torch_dir}/../Caffe2" REALPATH)
    set(Caffe2_DIR "${caffe2_dir}" CACHE PATH "Caffe2Config.cmake beside TorchConfig.cmake (LockstepTorch.cmake)" FORCE)
  endif()
endfunction()

# lockstep_use_wheel_cuda_libraries()
#   A pip torch (a CUDA build) loads the CUDA libraries of its own nvidia-* wheels (site-packages/nvidia/*/lib,
#   through libtorch_cuda's RPATH), but TorchConfig links programs against the CUDA toolkit CMake finds on the
#   machine (e.g. /usr/local/cuda 13.0 beside a wheel built with 13.2), and ld then resolves libtorch_cuda's
#   own dependencies from the toolkit too: an older libnccl.so.2 there fails the link with undefined nccl*
#   symbols, and a program would load two CUDA runtimes. When TORCH_INSTALL_PREFIX sits beside such wheels
#   (lockstep_find_torch calls this only then), the toolkit libraries that TORCH_LIBRARIES (there) and
#   CUDA::cudart (here) name are replaced by the wheels' copies of the same library, and ld searches the
#   wheels' folders first for the libraries libtorch_cuda needs (-rpath-link). Other installs (Debian's, the
#   pytorch.org zip) are left as they are.
macro(lockstep_use_wheel_cuda_libraries)
  if(TARGET CUDA::cudart)
    get_target_property(_lockstep_cudart CUDA::cudart IMPORTED_LOCATION)
    if(_lockstep_cudart MATCHES "^/")
      lockstep_library_of_this_torch("${_lockstep_cudart}" _lockstep_cudart)
      set_target_properties(CUDA::cudart PROPERTIES IMPORTED_LOCATION "${_lockstep_cudart}")
    endif()
  endif()
  string(REPLACE ";" ":" _lockstep_rpath_link "${_lockstep_wheel_dirs}")
  list(APPEND TORCH_LIBRARIES "-Wl,-rpath-link,${_lockstep_rpath_link}")
endmacro()

# lockstep_find_gloo_headers()
#   c10d's ProcessGroupGloo.hpp includes gloo's headers (<gloo/algorithm.h>, ...). Debian's LibTorch relies on
#   libgloo-dev; PyPI's torch wheels and the pytorch.org LibTorch zips link gloo statically and ship none of
#   its headers. Sets LOCKSTEP_GLOO_INCLUDE_DIR (a cache path: -DLOCKSTEP_GLOO_INCLUDE_DIR=DIR names the
#   folder that holds gloo/, e.g. a gloo checkout) and LOCKSTEP_WITH_GLOO (ON when found and not turned off
#   with -DLOCKSTEP_WITH_GLOO=OFF). Without them lockstep builds its other CPU backends (shm, mpi) and says
#   what to install.
macro(lockstep_find_gloo_headers)
  option(LOCKSTEP_WITH_GLOO "Build the gloo and hier backends (needs gloo's headers)" ON)
  if(LOCKSTEP_WITH_GLOO)
    find_path(LOCKSTEP_GLOO_INCLUDE_DIR gloo/algorithm.h HINTS ${TORCH_INCLUDE_DIRS}
              DOC "Folder holding gloo/algorithm.h (Debian/Ubuntu: libgloo-dev puts it in /usr/include)")
    if(LOCKSTEP_GLOO_INCLUDE_DIR AND NOT EXISTS "${LOCKSTEP_GLOO_INCLUDE_DIR}/gloo/algorithm.h")
      message(FATAL_ERROR "LOCKSTEP_GLOO_INCLUDE_DIR=${LOCKSTEP_GLOO_INCLUDE_DIR} holds no gloo/algorithm.h: name "
                          "the folder that contains gloo/ (e.g. /usr/include, or a gloo checkout's root).")
    endif()
    if(NOT LOCKSTEP_GLOO_INCLUDE_DIR)
      set(LOCKSTEP_WITH_GLOO OFF)
      message(WARNING
        "lockstep: gloo's headers (gloo/algorithm.h) were not found, and LibTorch ${LOCKSTEP_TORCH_VERSION} at "
        "${TORCH_INSTALL_PREFIX} ships none (pip wheels and pytorch.org zips link gloo in statically). Install "
        "them (Debian/Ubuntu: apt-get install libgloo-dev) or name a folder that holds gloo/ with "
        "-DLOCKSTEP_GLOO_INCLUDE_DIR=DIR, and reconfigure. Building without the gloo and hier backends: "
        "shm (ranks on one host) and mpi still work; --backend gloo will say what is missing.")
    endif()
  endif()
endmacro()

# lockstep_find_python_torch()
#   LOCKSTEP_PYTHON: the python3 whose `torch` is the LibTorch lockstep builds against (same MAJOR.MINOR):
#   the Python side of the tests (PyTorch's own sampler indices, torchrun scripts under `lockstep run`,
#   torch.load of checkpoints) and `lockstep bench peer`'s interpreter, so both sides run one PyTorch.
#   Candidates, first match wins: -DLOCKSTEP_PYTHON=PATH; the python of the environment a pip torch lies in
#   (<env>/lib/pythonX.Y/site-packages/torch -> <env>/bin/python3); /usr/bin/python3 (Debian's
#   python3-torch); python3 in PATH. Unset (LOCKSTEP_PYTHON-NOTFOUND) when none has that torch.
function(lockstep_find_python_torch)
  if(LOCKSTEP_PYTHON)
    return()
  endif()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" want "${LOCKSTEP_TORCH_VERSION}")
  set(env_python "")
  get_filename_component(parent "${TORCH_INSTALL_PREFIX}/.." REALPATH)
  if(parent MATCHES "/(site|dist)-packages$")
    get_filename_component(env_root "${TORCH_INSTALL_PREFIX}/../../../.." REALPATH)
    set(env_python "${env_root}/bin/python3")
  endif()
  find_program(LOCKSTEP_PATH_PYTHON3 python3)
  set(found "LOCKSTEP_PYTHON-NOTFOUND")
  foreach(candidate "${env_python}" /usr/bin/python3 "${LOCKSTEP_PATH_PYTHON3}")
    if(NOT candidate OR NOT EXISTS "${candidate}")
      continue()
    endif()
    execute_process(COMMAND "${candidate}" -c "import torch.distributed, torch; print(torch.__version__)"
                    OUTPUT_VARIABLE version RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0 AND version MATCHES "^${want}\\.")
      set(found "${candidate}")
      break()
    endif()
    list(APPEND tried "${candidate} (torch: ${version})")
  endforeach()
  set(LOCKSTEP_PYTHON "${found}" CACHE FILEPATH "python3 with the torch lockstep builds against (tests, bench peer)")
  if(found)
    message(STATUS "lockstep: python3 with torch ${want}: ${found}")
  else()
    message(WARNING "lockstep: no python3 with torch ${want} (tried: ${tried}); the tests that compare with "
                    "PyTorch will fail saying so. Install it (Debian's 1.13: apt-get install python3-torch; "
                    "2.x: pip install torch==${LOCKSTEP_TORCH_VERSION}) or pass -DLOCKSTEP_PYTHON=PATH.")
  endif()
endfunction()
