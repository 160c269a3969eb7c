#pragma once

// The seam between lockstep and the two c10d designs it builds against. This header and
// src/comm/c10d_compat.cpp are the only places in lockstep that look at the LibTorch version
// (TORCH_VERSION_MAJOR/MINOR from torch/version.h); everything else in comm/ is written once for both.
//
//   LibTorch 1.x (Debian 12's 1.13.1): a c10d::ProcessGroup *is* the backend. ProcessGroupGloo,
//     ProcessGroupNCCL and lockstep's own backends derive from it and carry out the collectives.
//   LibTorch 2.x: a c10d::ProcessGroup is a front. Each collective goes through the dispatcher to the
//     c10d::Backend registered for the tensors' device type (ProcessGroup::setBackend); ProcessGroupGloo,
//     ProcessGroupNCCL and lockstep's backends derive from c10d::Backend.
//   LibTorch 2.8+: c10d::Store::clone() (a second client of the same store) is pure virtual. TcpStore
//     defines clone() on every version (an override where it exists), so that needs no #if.
//   Gloo inside LibTorch 1.x cannot reduce bfloat16; inside 2.x it can.
//
// lockstep::comm::ProcessGroup calls its backend directly (the same calls on both designs, without the
// dispatcher in between) and keeps a front for native(), so code written against c10d::ProcessGroup
// (a user's comm hook, PyTorch's own C++ examples) works unchanged on either.

#include <string>

#include <c10/core/ScalarType.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

// CMake passes the version of the LibTorch it found (cmake/LockstepTorch.cmake): headers of another one
// (Debian's in /usr/include, say, ahead of a pip torch's) would mix two versions in one program.
#if defined(LOCKSTEP_TORCH_MAJOR) && \
    (LOCKSTEP_TORCH_MAJOR != TORCH_VERSION_MAJOR || LOCKSTEP_TORCH_MINOR != TORCH_VERSION_MINOR)
#error \
    "torch/version.h is not from the LibTorch CMake found: another LibTorch's headers come first on the include path"
#endif

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
/// 1 where c10d splits process groups (fronts) from backends (LibTorch 2.0+).
#define LOCKSTEP_C10D_HAS_BACKENDS 1
#else
#define LOCKSTEP_C10D_HAS_BACKENDS 0
#endif

namespace lockstep::comm {

/// The c10d class that carries out collectives, and that lockstep's backends (shm, hier, mpi) derive
/// from: c10d::ProcessGroup in LibTorch 1.x, c10d::Backend in 2.x. Both have the same collective
/// methods (allreduce, broadcast, allgather, ...) and constructor (rank, size).
#if LOCKSTEP_C10D_HAS_BACKENDS
using NativeBackend = c10d::Backend;
#else
using NativeBackend = c10d::ProcessGroup;
#endif

namespace detail {

/// The c10d::ProcessGroup through which PyTorch code calls `backend`: the backend itself in 1.x; in 2.x a
/// front whose getBackendName() is the backend's ("gloo", "shm", ...), with `backend` registered for the
/// device types it serves (gloo: CPU and CUDA; nccl: CUDA; lockstep's own: CPU), and `host` (when given,
/// beside nccl) registered for CPU. `store` is the group's.
c10::intrusive_ptr<c10d::ProcessGroup> as_process_group(const c10::intrusive_ptr<NativeBackend>& backend,
                                                        const c10::intrusive_ptr<c10d::Store>& store,
                                                        const c10::intrusive_ptr<NativeBackend>& host = {});

/// The backend behind `group` (its default backend in 2.x; `group` itself in 1.x).
c10::intrusive_ptr<NativeBackend> backend_of(const c10::intrusive_ptr<c10d::ProcessGroup>& group);

/// Whether this LibTorch's Gloo can reduce `dtype` (all of lockstep's dtypes but bfloat16 in 1.x).
bool gloo_can_reduce(at::ScalarType dtype);

}  // namespace detail
}  // namespace lockstep::comm
