// The core precompiled header: tensors, stores and process groups (lockstep_use_torch without NN).
// Keep it to headers that change rarely and are included by most torch translation units; each header
// here costs every translation unit that uses the PCH the templates its inline functions instantiate.
#pragma once
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
// Only where lockstep found gloo's headers (cmake/LockstepTorch.cmake); USE_C10D_GLOO alone says nothing
// about that (PyPI's torch defines it in its CMake targets, and ships no gloo headers).
#ifdef LOCKSTEP_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
