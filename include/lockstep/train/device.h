#pragma once

#include <c10/core/Device.h>

#include "lockstep/train/device_choice.h"

namespace lockstep::train {

/// The device of local rank `local_rank` of `local_world_size` on this node, by choose_device's rule
/// (device_choice.h) over the CUDA devices LibTorch sees; a CPU-only LibTorch (Debian's) sees none.
/// Throws std::invalid_argument naming what was found when the rule refuses.
c10::Device training_device(AcceleratorKind kind, int local_rank, int local_world_size, bool share_gpus);

/// Makes `device` this thread's current CUDA device (so that NCCL, the caching allocator and new tensors
/// without a device index use it); nothing for the CPU.
void use_device(const c10::Device& device);

/// The most memory `device`'s CUDA caching allocator has held allocated in this process (tensors, not
/// the cached reserve), MiB; 0 for the CPU. Built from device_memory_cuda.cpp where LibTorch has CUDA,
/// else device_memory_cpu.cpp (which never sees a CUDA device).
double peak_device_mb(const c10::Device& device);

/// Waits until `device` has run everything queued on it (torch.cuda.synchronize); nothing for the CPU.
void synchronize_device(const c10::Device& device);

}  // namespace lockstep::train
