#pragma once

#include <string>

#include "lockstep/comm/backend.h"

namespace lockstep::train {

/// Where training runs (Lightning's `accelerator`). Free of LibTorch, like TrainerOptions.
enum class AcceleratorKind {
  kAuto,  ///< gpu when this process sees a CUDA device, else cpu
  kCpu,
  kGpu,  ///< one CUDA device per rank: cuda:LOCAL_RANK among the visible ones (CUDA_VISIBLE_DEVICES)
};

/// Parses Lightning's spellings "auto", "cpu", "gpu" (and "cuda", a synonym of gpu). Throws
/// std::invalid_argument naming the value and the accepted ones.
AcceleratorKind parse_accelerator(const std::string& text);
/// "auto", "cpu" or "gpu".
const char* to_string(AcceleratorKind kind);

/*
 * Which device a rank trains on.
 *
 * One rank per GPU, as Lightning and torchrun do it: local rank r of a node takes the r-th visible CUDA
 * device (CUDA numbers the devices CUDA_VISIBLE_DEVICES leaves, from 0). kAuto is gpu when any device is
 * visible. More ranks on a node than visible GPUs is an error, because NCCL refuses two ranks on one device
 * (ncclInvalidUsage) — unless the ranks were told to share (`share_gpus`: a backend that moves CUDA tensors
 * through the host, such as gloo, chosen by name), when rank r takes device r mod the count. Asking for
 * gpu where none is visible is an error that names what the process found.
 */
struct DeviceChoice {
  bool cuda = false;
  int index = -1;  ///< the CUDA device index when cuda, else -1
};

/// Whether ranks on one node may train on the same GPU over `backend` (choose_device's `share_gpus`): only
/// over one that moves CUDA tensors through the host, gloo. nccl refuses two ranks on one device, shm, hier
/// and mpi move host memory only, and auto picks nccl for CUDA tensors.
bool ranks_may_share_gpu(comm::Backend backend);

/// What choose_device needs to know about the machine.
struct VisibleGpus {
  int count = 0;  ///< CUDA devices this process sees
  std::string
      details;  ///< what was found, for errors: "LibTorch 2.11.0 with CUDA 13.0, CUDA_VISIBLE_DEVICES=''"
};

/// The device of local rank `local_rank` of `local_world_size` ranks on this node (see above). Throws
/// std::invalid_argument naming the rank counts, the GPUs found and the fix.
DeviceChoice choose_device(AcceleratorKind kind, int local_rank, int local_world_size,
                           const VisibleGpus& gpus, bool share_gpus);

}  // namespace lockstep::train
