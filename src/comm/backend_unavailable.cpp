// Stubs for backends this LibTorch was built without: a clear error that says what to use instead.
// (MPI's stub is backend_mpi_unavailable.cpp, chosen by CMake.)
#include <torch/version.h>

#include "backend.h"
#include "lockstep/comm/comm_error.h"

namespace lockstep::comm::detail {

#ifndef LOCKSTEP_WITH_NCCL
c10::intrusive_ptr<c10d::ProcessGroup> make_nccl(const c10::intrusive_ptr<c10d::Store>&,
                                                 const ProcessGroupOptions& options) {
  throw CommError(options.rank(), "init_process_group",
                  "backend 'nccl' needs LibTorch built with CUDA and NCCL, and lockstep was built against "
                  "LibTorch " TORCH_VERSION
                  " without CUDA. Use --backend gloo (or auto), or rebuild lockstep against a CUDA LibTorch.");
}
#endif

}  // namespace lockstep::comm::detail
