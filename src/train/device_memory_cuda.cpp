// peak_device_mb where LibTorch has CUDA: the caching allocator's statistics (lockstep/train/device.h).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "lockstep/train/device.h"

namespace lockstep::train {

double peak_device_mb(const c10::Device& device) {
  if (!device.is_cuda()) return 0.0;
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0);  // [0]: all pools
}

void synchronize_device(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::device_synchronize();
}

}  // namespace lockstep::train
