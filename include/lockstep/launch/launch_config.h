#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/launch/launch_options.h"

namespace lockstep::launch {

/// A checked `LaunchOptions` with every default filled in: what the launcher actually runs.
struct LaunchConfig {
  std::vector<std::string> command;
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = "none";
  int max_restarts = 0;
  /// Empty: no log files.
  std::string log_dir;
  std::chrono::milliseconds grace_period = std::chrono::seconds(3);
  int direct_stdout_local_rank = -1;  ///< -1: none (see LaunchOptions)
  /// See LaunchOptions::collective_timeout. `collective_timeout_given`: it came from the flag, so the
  /// workers get it as LOCKSTEP_TIMEOUT (otherwise they read the same environment as the launcher).
  std::chrono::milliseconds collective_timeout = std::chrono::seconds(1800);
  bool collective_timeout_given = false;
  /// OMP_NUM_THREADS given to workers whose environment does not set it: max(1, cores / nproc_per_node).
  int omp_num_threads = 1;

  /// Cannot overflow for a config from `resolve` (it checks the product).
  int world_size() const { return nnodes * nproc_per_node; }
  /// Global rank of this node's worker `local_rank`.
  int rank_of(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
};

/// Checks `options` and fills in the defaults. Throws `LaunchError` naming the flag and its value on
/// the first problem: an empty command, nproc_per_node/nnodes < 1, nnodes * nproc_per_node above
/// INT_MAX (so that `world_size()` and `rank_of()` cannot overflow), node_rank outside [0, nnodes),
/// a port outside 1..65535, an empty master address or run id, max_restarts < 0, a negative grace
/// period, a collective timeout that is not positive (or a malformed LOCKSTEP_TIMEOUT), or `standalone`
/// combined with nnodes > 1 or an explicit master address/port.
///
/// `standalone` binds a socket to find a free port (so calling this twice gives different ports).
LaunchConfig resolve(const LaunchOptions& options);

}  // namespace lockstep::launch
