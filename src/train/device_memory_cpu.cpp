// peak_device_mb where LibTorch has no CUDA (Debian's): no device memory to count (lockstep/train/device.h).
#include "lockstep/train/device.h"

namespace lockstep::train {

double peak_device_mb(const c10::Device&) {
  return 0.0;
}

void synchronize_device(const c10::Device&) {}

}  // namespace lockstep::train
