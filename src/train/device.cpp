// The LibTorch side of choosing a rank's device: what CUDA devices this process sees (device.h).
#include "lockstep/train/device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cstdlib>
#include <string>

namespace lockstep::train {
namespace {

VisibleGpus visible_gpus() {
  VisibleGpus gpus;
  gpus.count = static_cast<int>(torch::cuda::device_count());
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");  // NOLINT(concurrency-mt-unsafe)
  gpus.details = "LibTorch " TORCH_VERSION " sees " + std::to_string(gpus.count) + " CUDA device(s)" +
                 ", CUDA_VISIBLE_DEVICES=" + (visible ? "'" + std::string(visible) + "'" : "unset");
  if (gpus.count == 0) gpus.details += "; a CPU-only LibTorch (such as Debian's) never sees one";
  return gpus;
}

}  // namespace

c10::Device training_device(AcceleratorKind kind, int local_rank, int local_world_size, bool share_gpus) {
  if (kind == AcceleratorKind::kCpu) return c10::Device(c10::kCPU);
  const DeviceChoice choice = choose_device(kind, local_rank, local_world_size, visible_gpus(), share_gpus);
  if (!choice.cuda) return c10::Device(c10::kCPU);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(choice.index));
}

void use_device(const c10::Device& device) {
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(device);
}

}  // namespace lockstep::train
