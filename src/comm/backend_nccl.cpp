// NCCL: the GPU backend, compiled only when LibTorch was built with CUDA and nccl.h was found
// (src/comm/CMakeLists.txt). Compiled against LibTorch 1.13 and 2.x (a c10d backend on both, c10d_compat.h).
// Run on one H100 with a world of one (docs/gpu.md); NCCL between two GPUs has not run yet (the GPU machine
// has one). On a machine without a GPU it refuses with the reason.
#include <chrono>
#include <string>

#include <ATen/Context.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "backend.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/detail/torch_version.h"

namespace lockstep::comm::detail {

bool nccl_available() {
  return true;
}

void shutdown_nccl(NativeBackend& backend) {
#if LOCKSTEP_TORCH_AT_LEAST(2, 4)
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(&backend)) nccl->shutdown();
#else
  (void)backend;
#endif
}

bool capturing_cuda_graph() {
  return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
}

c10::intrusive_ptr<NativeBackend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                            const ProcessGroupOptions& options) {
  if (at::getNumGPUs() == 0) {
    throw CommError(options.rank(), "init_process_group",
                    "backend 'nccl' needs a CUDA device, and this process sees none (check nvidia-smi and "
                    "CUDA_VISIBLE_DEVICES); use backend 'gloo' or 'shm' (or 'auto') on CPU");
  }
  auto nccl = c10d::ProcessGroupNCCL::Options::create();
  // A little after lockstep's own watch of the collective (progress.h), which names the missing ranks
  // first; then NCCL's watchdog aborts the communicator (TORCH_NCCL_ASYNC_ERROR_HANDLING, set by the
  // launcher) instead of leaving the process hung.
  nccl->timeout = options.collective_timeout() + 3 * options.progress_interval() + std::chrono::seconds(2);
  try {
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, options.rank(), options.world_size(), nccl);
  } catch (const std::exception& e) {
    throw CommError(options.rank(), "init_process_group", std::string("NCCL process group: ") + e.what());
  }
}

}  // namespace lockstep::comm::detail
