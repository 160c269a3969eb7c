// `lockstep fit`: checks the flags, then either becomes one rank of a surrounding job (exec of the rank
// program `lockstep-fit`) or starts --devices local ranks of it through the launcher. The CLI itself
// never loads LibTorch; `lockstep-fit` (fit_rank_main.cpp) does the training.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "fit_flags.h"
#include "install_paths.h"
#include "lockstep/env/environment.h"
#include "lockstep/env/slurm.h"
#include "lockstep/launch/launch.h"

namespace lockstep::cli {
namespace {

// Starts this node's ranks with `options` (plus what every launch of lockstep fit shares: restarts and
// the collective timeout) and returns the job's exit status.
int launch_ranks(launch::LaunchOptions options, const train::FitConfig& config) {
  try {
    options.max_restarts(config.max_restarts);
    if (const auto timeout = config.collective_timeout_duration()) options.collective_timeout(*timeout);
    launch::Launcher launcher(options);
    return launcher.run().exit_status;
  } catch (const launch::LaunchError& e) {
    std::cerr << "lockstep fit: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace

int fit_main(int argc, char** argv) {
  train::FitConfig config;
  if (const int status = parse_fit_flags(argc, argv, config); status >= 0) return status;

  const std::string program = find_helper_program("lockstep-fit", "LOCKSTEP_FIT_PROGRAM");
  if (program.empty()) {
    std::cerr << "lockstep fit: cannot find the rank program 'lockstep-fit' next to this executable or in "
                 "../libexec/lockstep/ (reinstall lockstep, or set LOCKSTEP_FIT_PROGRAM to its path)\n";
    return 127;
  }
  std::vector<std::string> command{program};
  for (int i = 1; i < argc; ++i) command.emplace_back(argv[i]);

  env::Environment environment;
  try {
    environment = env::from_env();
  } catch (const env::EnvError& e) {
    std::cerr << "lockstep fit: " << e.what() << '\n';
    return 2;
  }

  // Inside an sbatch script but not started by srun (no SLURM_STEP_ID): Slurm's variables describe the
  // job, not this process; start --devices local ranks as on a machine of one's own.
  std::optional<env::SlurmNode> slurm_node;
  if (environment.source == env::Source::kSlurm) {
    try {
      slurm_node = env::slurm_node();
    } catch (const env::EnvError& e) {
      std::cerr << "lockstep fit: " << e.what() << '\n';
      return 2;
    }
    if (!slurm_node) environment = env::Environment();
  }
  // Lightning's Slurm shape: srun started one task per node (--ntasks-per-node=1) and --devices asks for
  // more ranks per node, so this task starts its node's ranks, taking the node count, its node, the
  // master and the job id from Slurm (as `lockstep run` does under srun).
  const bool node_launcher = slurm_node && slurm_node->tasks_on_node == 1 && config.devices && *config.devices > 1;
  if (node_launcher && config.num_nodes && *config.num_nodes != slurm_node->num_nodes) {
    std::cerr << "lockstep fit: --num-nodes " << *config.num_nodes << " does not match the Slurm job's "
              << slurm_node->num_nodes << " node(s) (SLURM_NNODES): make them equal, or drop --num-nodes\n";
    return 2;
  }
  if (node_launcher) {
    launch::LaunchOptions options(command);
    options.nproc_per_node(*config.devices)
        .nnodes(slurm_node->num_nodes)
        .node_rank(slurm_node->node_rank)
        .master_addr(slurm_node->master_addr)
        .master_port(slurm_node->master_port)
        .run_id(slurm_node->run_id);
    if (slurm_node->node_rank == 0) options.direct_stdout_local_rank(0);
    return launch_ranks(options, config);
  }

  if (environment.source != env::Source::kSingleProcess && config.max_restarts > 0) {
    // The ranks are another launcher's to restart: silently ignoring the flag would promise a recovery
    // that never comes.
    std::cerr << "lockstep fit: --max-restarts " << config.max_restarts << " applies when lockstep fit starts the "
              << "ranks itself; this process is one rank of a job started by " << env::to_string(environment.source)
              << ": give the restarts to that launcher (lockstep run --max-restarts K), and keep --ckpt-dir so that "
                 "restarted ranks resume\n";
    return 2;
  }
  if (environment.source != env::Source::kSingleProcess) {
    // Already one rank of a job (lockstep run, torchrun, srun, mpirun): become that rank.
    std::vector<char*> args;
    for (std::string& arg : command) args.push_back(arg.data());
    args.push_back(nullptr);
    ::execv(program.c_str(), args.data());
    std::cerr << "lockstep fit: cannot execute '" << program << "': " << std::strerror(errno) << '\n';
    return 126;
  }

  if (config.num_nodes && *config.num_nodes > 1) {
    std::cerr << "lockstep fit: --num-nodes " << *config.num_nodes
              << " needs one launcher per node: run `lockstep run --nnodes " << *config.num_nodes
              << " --node-rank R --master-addr HOST ... -- lockstep fit ...` on each node, or use srun\n";
    return 2;
  }
  if (config.backend == "mpi" && config.devices.value_or(1) > 1) {
    // Ranks started here would each be an MPI world of one (they fail in init_process_group otherwise).
    std::cerr
        << "lockstep fit: --backend mpi needs its ranks started by mpirun: run `mpirun -np "
        << *config.devices
        << " lockstep fit --backend mpi ...` without --devices (as root add --allow-run-as-root), or keep "
           "--devices and use another --backend (auto, shm, gloo)\n";
    return 2;
  }
  launch::LaunchOptions options(command);
  options.nproc_per_node(config.devices.value_or(1)).standalone(true).direct_stdout_local_rank(0);
  return launch_ranks(options, config);
}

}  // namespace lockstep::cli
