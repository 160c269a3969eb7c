#pragma once

#include <string>

namespace lockstep::comm {

/// Collective backends. kGloo works everywhere (CPU tensors, any hosts); kShm moves CPU tensors
/// through shared memory between ranks on one host (process_group_shm.h); kNccl needs LibTorch built
/// with CUDA; kMpi needs lockstep built with MPI (libopenmpi-dev) and ranks started by mpirun
/// (process_group_mpi.h). kAuto is resolved by init_process_group: nccl when LibTorch has CUDA, else
/// shm when every rank is on this host (checked through the store, not assumed) and /dev/shm has room
/// for twice the segment, else gloo; multi-node jobs get hier (below) or gloo.
/// kHier: shm inside each node, Gloo between the nodes' local rank 0 (process_group_hier.h); auto picks it
/// for multi-node CPU jobs whose nodes all run local_world_size ranks.
///
/// Free of LibTorch (its own small library, lockstep::comm_backend), so that options records the CLI
/// validates without loading libtorch (TrainerOptions) can hold one.
enum class Backend { kGloo, kNccl, kMpi, kShm, kAuto, kHier };

/// "gloo", "nccl", "mpi", "shm", "auto", "hier".
const char* to_string(Backend backend);
/// Parses "gloo" | "shm" | "hier" | "nccl" | "mpi" | "auto". Throws std::invalid_argument naming the value
/// and the accepted ones ("backend 'tcp' is not known (expected one of: ...)").
Backend parse_backend(const std::string& name);

}  // namespace lockstep::comm
