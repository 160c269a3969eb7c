// `lockstep fit`: checks the flags, then either becomes one rank of a surrounding job (exec of the rank
// program `lockstep-fit`) or starts --devices local ranks of it through the launcher. The CLI itself
// never loads LibTorch; `lockstep-fit` (fit_rank_main.cpp) does the training.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "fit_flags.h"
#include "install_paths.h"
#include "lockstep/env/environment.h"
#include "lockstep/launch/launch.h"

namespace lockstep::cli {
namespace {

// Starts this node's ranks with `options` (plus the collective timeout every launch of lockstep fit
// shares) and returns the job's exit status.
int launch_ranks(launch::LaunchOptions options, const train::FitConfig& config) {
  try {
    if (const auto& timeout = config.trainer.collective_timeout()) options.collective_timeout(*timeout);
    launch::Launcher launcher(options);
    return launcher.run().exit_status;
  } catch (const launch::LaunchError& e) {
    std::cerr << "lockstep fit: " << in_flag_words(e.what()) << '\n';
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

  launch::RankRequest request;
  request.devices = config.trainer.devices();
  request.num_nodes = config.trainer.num_nodes();
  request.max_restarts = config.max_restarts;
  request.in_place = config.trainer.elastic();
  request.mpi_backend = config.trainer.backend() == comm::Backend::kMpi;
  request.program = "lockstep fit";
  request.always_launch = true;  // the rank program runs under the launcher, which also restarts it
  launch::RankPlan plan;
  try {
    plan = launch::plan_rank_start(request, command);
  } catch (const env::EnvError& e) {
    std::cerr << "lockstep fit: " << e.what() << '\n';
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "lockstep fit: " << in_flag_words(e.what()) << '\n';
    return 2;
  }
  if (!plan.become_rank) return launch_ranks(*plan.launch, config);
  // Already one rank of a job (lockstep run, torchrun, srun, mpirun): become that rank.
  std::vector<char*> args;
  for (std::string& arg : command) args.push_back(arg.data());
  args.push_back(nullptr);
  ::execv(program.c_str(), args.data());
  std::cerr << "lockstep fit: cannot execute '" << program << "': " << std::strerror(errno) << '\n';
  return 126;
}

}  // namespace lockstep::cli
