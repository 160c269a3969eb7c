#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/launch/launch_options.h"

namespace lockstep::launch {

/// Where this node's workers stand in the job: fixed for a static launch, new in each round of a c10d
/// one. What worker_environment turns into RANK, WORLD_SIZE, GROUP_RANK, MASTER_ADDR, ...
struct NodeWorld {
  int node_rank = 0;         ///< GROUP_RANK
  int nnodes = 1;            ///< GROUP_WORLD_SIZE
  int rank_offset = 0;       ///< RANK of local rank 0 (the workers of the nodes before this one)
  int world_size = 1;        ///< WORLD_SIZE
  int role_rank_offset = 0;  ///< ROLE_RANK of local rank 0
  int role_world_size = 1;   ///< ROLE_WORLD_SIZE
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;  ///< TORCHELASTIC_RESTART_COUNT: restarts (static) or rounds before this one (c10d)

  int rank_of(int local_rank) const { return rank_offset + local_rank; }
};

/// A checked `LaunchOptions` with every default filled in: what the launcher actually runs.
struct LaunchConfig {
  /// The argv each worker runs: the user's command, behind the Python interpreter where it runs under
  /// Python (ProgramMode).
  std::vector<std::string> command;
  int nproc_per_node = 1;
  /// static: the job's node count. c10d: see min_nodes / max_nodes.
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = "none";
  /// The job secret every store of the job asks for (LaunchOptions::job_secret_file); empty when the job
  /// runs without one (`no_job_secret`).
  std::string job_secret;
  int max_restarts = 0;
  /// LaunchOptions::in_place and heartbeat_timeout.
  bool in_place = false;
  /// The user named the master (rdzv_endpoint, master_addr/master_port). Under in_place the launcher serves
  /// the workers' store there, and a launcher that finds it served joins the running job.
  bool master_named = false;
  bool no_job_secret = false;  ///< the job runs without a secret on purpose (LaunchOptions::no_job_secret)
  std::chrono::milliseconds heartbeat_timeout{5000};
  /// Empty: no log files, unless `output` asks for some (the launcher then makes a fresh base directory
  /// under $TMPDIR and says where).
  std::string log_dir;
  /// How output is shown and kept; tee is 3 here when log_dir was given without redirects or tee.
  WorkerOutput output;
  std::vector<int> signals_to_handle = default_signals_to_handle();
  bool virtual_local_rank = false;
  std::chrono::milliseconds grace_period = std::chrono::seconds(3);
  int direct_stdout_local_rank = -1;  ///< -1: none (see LaunchOptions)
  /// See LaunchOptions::collective_timeout. `collective_timeout_given`: it came from the flag, so the
  /// workers get it as LOCKSTEP_TIMEOUT (otherwise they read the same environment as the launcher).
  std::chrono::milliseconds collective_timeout = std::chrono::seconds(1800);
  bool collective_timeout_given = false;
  /// OMP_NUM_THREADS given to workers whose environment does not set it: max(1, cores / nproc_per_node).
  int omp_num_threads = 1;
  std::string role = "default";
  /// Variables every worker gets besides torchrun's (LaunchOptions::worker_env).
  std::vector<std::pair<std::string, std::string>> worker_env;

  // The rendezvous (rendezvous_options.h). static: min_nodes == max_nodes == nnodes.
  RdzvBackend rdzv_backend = RdzvBackend::kStatic;
  int min_nodes = 1;
  int max_nodes = 1;
  Endpoint rdzv_endpoint;              ///< c10d only
  RdzvConf rdzv_conf;                  ///< c10d only
  std::optional<int> asked_node_rank;  ///< c10d: --node-rank, a wish for each round
  std::string local_addr;              ///< c10d: empty: the address this node reaches the store from
  std::chrono::milliseconds monitor_interval{100};

  /// Cannot overflow for a config from `resolve` (it checks the product).
  int world_size() const { return nnodes * nproc_per_node; }
  /// Global rank of this node's worker `local_rank` in a static launch.
  int rank_of(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
  /// The world of a static launch: this node's place as the flags fix it.
  NodeWorld static_world(int restart_count = 0) const;
};

/// Checks `options` and fills in the defaults. Throws `LaunchError` naming the option and its value on
/// the first problem: an empty command, nproc_per_node/nnodes < 1, nnodes * nproc_per_node above
/// INT_MAX (so that `world_size()` and `rank_of()` cannot overflow), node_rank outside [0, nnodes),
/// a port outside 1..65535, an empty master address or run id, max_restarts < 0, a negative grace
/// period, a collective timeout that is not positive (or a malformed LOCKSTEP_TIMEOUT), `standalone`
/// combined with nnodes > 1 or an explicit master address/port or a c10d rendezvous, an elastic range
/// under the static rendezvous, a script to run under Python when no interpreter can be found, a role
/// with characters outside [A-Za-z0-9_.-], a worker_env name that torchrun's variables use, or a job
/// that spans nodes with neither a job secret nor no_job_secret (the message says how to give one).
///
/// `standalone` binds a socket to find a free port (so calling this twice gives different ports).
LaunchConfig resolve(const LaunchOptions& options);

}  // namespace lockstep::launch
