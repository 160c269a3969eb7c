#pragma once

#include <string>
#include <vector>

#include "lockstep/detail/worker_contract.h"
#include "lockstep/launch/launch_config.h"

namespace lockstep::launch {

/// Environment entries ("KEY=VALUE"), as execve takes them.
using EnvEntries = std::vector<std::string>;

/// The environment of worker `local_rank`: `base` (normally the launcher's own environment) with
/// torchrun's variables set, replacing any inherited values:
///
///   RANK               node_rank * nproc_per_node + local_rank
///   LOCAL_RANK         local_rank
///   WORLD_SIZE         nnodes * nproc_per_node
///   LOCAL_WORLD_SIZE   nproc_per_node
///   GROUP_RANK         node_rank            GROUP_WORLD_SIZE   nnodes
///   ROLE_RANK          = RANK               ROLE_WORLD_SIZE    = WORLD_SIZE       ROLE_NAME  default
///   MASTER_ADDR, MASTER_PORT
///   TORCHELASTIC_RESTART_COUNT  restart_count   TORCHELASTIC_MAX_RESTARTS   max_restarts
///   TORCHELASTIC_RUN_ID         run_id          TORCHELASTIC_USE_AGENT_STORE False
///                      (rank 0 hosts the TCPStore itself; lockstep's launcher runs no store)
///   LOCKSTEP_HEARTBEAT_FD  detail::kHeartbeatFd: where lockstep's process groups write their heartbeats
///                      (lockstep/detail/worker_contract.h)
///   LOCKSTEP_TIMEOUT   config.collective_timeout in seconds, only when it came from --collective-timeout
///   OMP_NUM_THREADS    config.omp_num_threads, only when `base` does not set it
///   PYTHONUNBUFFERED   1, only when `base` does not set it (to any value): workers' stdout is a pipe,
///                      which Python would block-buffer, holding lines back from the launcher
///
/// Other entries of `base` keep their order; replaced ones are dropped, the variables above follow.
/// Pure: reads nothing but its arguments.
EnvEntries worker_environment(const LaunchConfig& config, int local_rank, int restart_count,
                              const EnvEntries& base);

/// The calling process's environment (`environ`) as entries.
EnvEntries current_environment();

}  // namespace lockstep::launch
