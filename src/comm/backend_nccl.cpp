// NCCL: the GPU backend, compiled only when LibTorch was built with CUDA (src/comm/CMakeLists.txt).
// NOT YET RUN ON A GPU: no GPU machine has been lent to this project so far; see docs/architecture.md.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/version.h>

#include "backend.h"
#include "lockstep/comm/comm_error.h"

#if TORCH_VERSION_MAJOR >= 2
#error "backend_nccl.cpp targets the LibTorch 1.x c10d API; LibTorch 2.x wraps ProcessGroupNCCL as a c10d::Backend"
#endif

namespace lockstep::comm::detail {

c10::intrusive_ptr<c10d::ProcessGroup> make_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                                 const ProcessGroupOptions& options) {
  auto nccl = c10d::ProcessGroupNCCL::Options::create();
  nccl->timeout = options.collective_timeout();
  try {
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, options.rank(), options.world_size(), nccl);
  } catch (const std::exception& e) {
    throw CommError(options.rank(), "init_process_group", std::string("NCCL process group: ") + e.what());
  }
}

}  // namespace lockstep::comm::detail
