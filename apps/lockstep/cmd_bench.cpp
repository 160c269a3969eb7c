// `lockstep bench`: dispatches to one benchmark. Each prints its figures next to a baseline measured in
// the same run (DESIGN.md: bench/); the CLI stays free of LibTorch, so the measured programs are child
// processes (lockstep-bench-allreduce, lockstep fit, the Python peer).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "bench_commands.h"
#include "cli_parse.h"
#include "commands.h"
#include "lockstep/env/environment.h"

namespace lockstep::cli {
namespace {

constexpr const char* kUsage =
    "usage: lockstep bench <benchmark> [options]\n"
    "\n"
    "Benchmarks; each measures its baseline in the same run and prints the ratio.\n"
    "\n"
    "benchmarks:\n"
    "  allreduce  all-reduce latency, algbw and busbw per message size (4 KiB .. 64 MiB), N local\n"
    "             ranks: lockstep's ProcessGroup with --backend next to raw c10d Gloo\n"
    "  scaling    strong scaling of `lockstep fit`: time per epoch at each rank count, speedup and\n"
    "             efficiency, as a markdown table\n"
    "  peer       `lockstep fit` next to the Python DDP peer (PyTorch DDP + DataLoader under\n"
    "             the python3 with lockstep's LibTorch version), same recipe: epoch times, accuracy, ratio\n"
    "\n"
    "`lockstep bench <benchmark> --help` describes each one. Run benchmarks on a quiet machine:\n"
    "they start several processes and time them.\n";

}  // namespace

int refuse_inside_job(const std::string& command) {
  try {
    const env::Environment environment = env::from_env();
    if (environment.source == env::Source::kSingleProcess) return 0;
    std::cerr << command << ": this process is rank " << environment.rank << " of " << environment.world_size
              << " of a job (from " << env::to_string(environment.source)
              << "'s environment), but a benchmark starts its own local ranks: run it directly from a shell, "
                 "not under lockstep run, torchrun, srun or mpirun\n";
  } catch (const env::EnvError& e) {
    std::cerr << command << ": " << e.what() << '\n';
  }
  return 2;
}

int parse_bench_flags(CLI::App& app, int argc, char** argv) {
  return parse_or_status(app, argc, argv, [&app](const std::string& message) {
    return bench_usage_error(app.get_name(), message);
  });
}

int bench_usage_error(const std::string& command, const std::string& message) {
  std::cerr << command << ": " << message << "\nRun '" << command << " --help' for the flags.\n";
  return 2;
}

int bench_main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string benchmark = argv[1];
  if (benchmark == "allreduce") return bench_allreduce_main(argc - 1, argv + 1);
  if (benchmark == "scaling") return bench_scaling_main(argc - 1, argv + 1);
  if (benchmark == "peer") return bench_peer_main(argc - 1, argv + 1);
  std::fprintf(stderr,
               "lockstep bench: unknown benchmark '%s' (expected one of: allreduce, scaling, peer)\n\n%s",
               benchmark.c_str(), kUsage);
  return 2;
}

}  // namespace lockstep::cli
