#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lockstep/env/environment.h"
#include "lockstep/env/slurm.h"
#include "lockstep/launch/launch_options.h"

namespace lockstep::launch {

/*
 * Who starts the ranks: one rule for `lockstep fit` and for a Trainer program, under any launcher.
 *
 *   - This process is already one rank of a job (lockstep run, torchrun, mpirun, srun with one task per
 *     rank): it becomes that rank. `devices` and `num_nodes`, when given, must agree with the job.
 *   - srun started one task per node (Lightning's Slurm shape, --ntasks-per-node=1) and devices > 1 asks
 *     for more ranks per node: this task starts its node's ranks, with the node count, its node, the
 *     master and the job id from Slurm.
 *   - A process of its own (a terminal; an sbatch script outside srun, whose SLURM_* variables describe
 *     the job, not this process): with devices > 1 it starts that many local ranks, standalone; with one
 *     device it is the only rank itself, unless the caller always wants a launcher (always_launch).
 *
 * Refused, with the reason and the fix: num_nodes > 1 without a launcher per node; restarts asked of a
 * job another launcher started (they are that launcher's to do); the MPI backend with ranks started here
 * (each would be an MPI world of one).
 */
struct RankRequest {
  std::optional<int> devices;    ///< ranks per node asked for
  std::optional<int> num_nodes;  ///< nodes asked for
  int max_restarts = 0;          ///< restarts asked for (only a launcher started here can do them)
  bool in_place = false;         ///< in-place recovery asked for (LaunchOptions::in_place)
  bool mpi_backend = false;      ///< the ranks will use the MPI backend
  /// Start even a single rank through the launcher (`lockstep fit`: its rank program, and restarts).
  bool always_launch = false;
  std::string program = "this program";  ///< how messages name the program ("lockstep fit")
};

/// What this process does.
struct RankPlan {
  bool become_rank = false;             ///< true: train as the rank `environment` describes
  env::Environment environment;         ///< who this process is (become_rank)
  std::optional<LaunchOptions> launch;  ///< otherwise: the launcher's options for `command`
};

/// The rule above for this process's `environment` and Slurm node (env::from_env, env::slurm_node).
/// `command` is what each started rank runs. Throws std::invalid_argument naming the options.
RankPlan plan_rank_start(const RankRequest& request, const std::vector<std::string>& command,
                         env::Environment environment, const std::optional<env::SlurmNode>& slurm_node);

/// The same, reading the environment and the Slurm node of this process (throws env::EnvError when they
/// are malformed).
RankPlan plan_rank_start(const RankRequest& request, const std::vector<std::string>& command);

}  // namespace lockstep::launch
