// Which device a rank trains on: the rule is written once, in include/lockstep/train/device_choice.h.
#include "lockstep/train/device_choice.h"

#include <stdexcept>

#include "lockstep/detail/enum_names.h"
namespace lockstep::train {

namespace {

// "cuda": a synonym of gpu, accepted but not listed.
constexpr lockstep::detail::EnumNames<AcceleratorKind, 4> kAcceleratorNames{
    {{AcceleratorKind::kAuto, "auto"},
     {AcceleratorKind::kCpu, "cpu"},
     {AcceleratorKind::kGpu, "gpu"},
     {AcceleratorKind::kGpu, "cuda", /*alias=*/true}}};

}  // namespace

AcceleratorKind parse_accelerator(const std::string& text) {
  return lockstep::detail::parse_enum(kAcceleratorNames, text, "accelerator");
}

const char* to_string(AcceleratorKind kind) {
  return lockstep::detail::enum_to_string(kAcceleratorNames, kind);
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
