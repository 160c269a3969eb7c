// NCCL stub, compiled when LibTorch has no CUDA or nccl.h was not found (src/comm/CMakeLists.txt): a clear
// error that says what to use instead.
#include <torch/version.h>

#include "backend.h"
#include "lockstep/comm/comm_error.h"

namespace lockstep::comm::detail {

bool nccl_available() {
  return false;
}

void shutdown_nccl(NativeBackend& /*backend*/) {}

bool capturing_cuda_graph() {
  return false;
}

c10::intrusive_ptr<NativeBackend> make_nccl(const c10::intrusive_ptr<c10d::Store>&,
                                            const ProcessGroupOptions& options) {
  throw CommError(options.rank(), "init_process_group",
                  "backend 'nccl' needs LibTorch built with CUDA and NCCL's headers, and lockstep was built "
                  "against LibTorch " TORCH_VERSION
                  " without them (a CPU-only LibTorch, or no nccl.h when CMake ran). Use backend 'gloo' (or "
                  "auto), or rebuild lockstep against a CUDA LibTorch with NCCL's headers installed.");
}

}  // namespace lockstep::comm::detail
