#pragma once

#include <string>
#include <vector>

#include "lockstep/detail/worker_contract.h"
#include "lockstep/launch/launch_config.h"

namespace lockstep::launch {

/// Environment entries ("KEY=VALUE"), as execve takes them.
using EnvEntries = std::vector<std::string>;

/// The environment of worker `local_rank` of a node placed in the job as `world` says: `base` (normally
/// the launcher's own environment) with torchrun's variables set, replacing any inherited values:
///
///   RANK               world.rank_offset + local_rank
///   LOCAL_RANK         local_rank
///   WORLD_SIZE         world.world_size
///   LOCAL_WORLD_SIZE   nproc_per_node
///   GROUP_RANK         world.node_rank      GROUP_WORLD_SIZE   world.nnodes
///   ROLE_RANK          world.role_rank_offset + local_rank
///   ROLE_WORLD_SIZE    world.role_world_size                   ROLE_NAME  config.role
///   MASTER_ADDR, MASTER_PORT   world's
///   TORCHELASTIC_RESTART_COUNT  world.restart_count   TORCHELASTIC_MAX_RESTARTS   max_restarts
///   TORCHELASTIC_RUN_ID         run_id          TORCHELASTIC_USE_AGENT_STORE False
///                      (rank 0 hosts the workers' TCPStore itself, as under torchrun with
///                      TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: a launcher's store is its own)
///   LOCKSTEP_HEARTBEAT_FD  detail::kHeartbeatFd: where lockstep's process groups write their heartbeats
///                      (lockstep/detail/worker_contract.h)
///   LOCKSTEP_TIMEOUT   config.collective_timeout in seconds, only when it came from --collective-timeout
///   OMP_NUM_THREADS    config.omp_num_threads, only when `base` does not set it
///   PYTHONUNBUFFERED   1, only when `base` does not set it (to any value): workers' stdout is a pipe,
///                      which Python would block-buffer, holding lines back from the launcher
///   config.worker_env  as given (LaunchOptions::worker_env); a name set there also stands instead of the
///                      launcher's defaults above (OMP_NUM_THREADS, PYTHONUNBUFFERED)
///
/// Other entries of `base` keep their order; replaced ones are dropped, the variables above follow.
/// Pure: reads nothing but its arguments.
EnvEntries worker_environment(const LaunchConfig& config, const NodeWorld& world, int local_rank,
                              const EnvEntries& base);

/// The calling process's environment (`environ`) as entries.
EnvEntries current_environment();

}  // namespace lockstep::launch
