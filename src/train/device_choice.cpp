// Which device a rank trains on: the rule is written once, in include/lockstep/train/device_choice.h.
#include "lockstep/train/device_choice.h"

#include <stdexcept>

namespace lockstep::train {

AcceleratorKind parse_accelerator(const std::string& text) {
  if (text == "auto") return AcceleratorKind::kAuto;
  if (text == "cpu") return AcceleratorKind::kCpu;
  if (text == "gpu" || text == "cuda") return AcceleratorKind::kGpu;
  throw std::invalid_argument("accelerator '" + text + "' is not known (expected one of: auto, cpu, gpu)");
}

const char* to_string(AcceleratorKind kind) {
  switch (kind) {
    case AcceleratorKind::kAuto:
      return "auto";
    case AcceleratorKind::kCpu:
      return "cpu";
    case AcceleratorKind::kGpu:
      return "gpu";
  }
  return "?";
}

DeviceChoice choose_device(AcceleratorKind kind, int local_rank, int local_world_size,
                           const VisibleGpus& gpus, bool share_gpus) {
  if (local_rank < 0 || local_world_size < 1 || local_rank >= local_world_size) {
    throw std::invalid_argument(
        "local rank " + std::to_string(local_rank) + " of " + std::to_string(local_world_size) +
        " rank(s) on this node: the launcher's LOCAL_RANK and LOCAL_WORLD_SIZE disagree");
  }
  if (kind == AcceleratorKind::kCpu || (kind == AcceleratorKind::kAuto && gpus.count == 0)) return {};
  if (gpus.count == 0) {
    throw std::invalid_argument(
        "accelerator 'gpu' was asked for, but this process sees no CUDA device (" + gpus.details +
        "): check nvidia-smi and CUDA_VISIBLE_DEVICES, or train on accelerator 'cpu'");
  }
  if (local_world_size > gpus.count && !share_gpus) {
    throw std::invalid_argument(
        std::to_string(local_world_size) + " ranks on this node but " + std::to_string(gpus.count) +
        " visible GPU(s) (" + gpus.details + "): one rank per GPU, so start at most " +
        std::to_string(gpus.count) + " (devices " + std::to_string(gpus.count) +
        "), or share the GPUs over backend 'gloo' (slower: for tests), or train on accelerator 'cpu'");
  }
  return {true, local_rank % gpus.count};
}

bool ranks_may_share_gpu(comm::Backend backend) {
  return backend == comm::Backend::kGloo;
}

}  // namespace lockstep::train
