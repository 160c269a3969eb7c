#pragma once

#include <string>

namespace CLI {
class App;
}

// The benchmarks of `lockstep bench` (cmd_bench*.cpp). Each takes the arguments after its own name
// (argv[0] is the benchmark's name) and returns the process exit status.
namespace lockstep::cli {

int bench_allreduce_main(int argc, char** argv);  // lockstep bench allreduce  (cmd_bench_allreduce.cpp)
int bench_scaling_main(int argc, char** argv);    // lockstep bench scaling    (cmd_bench_scaling.cpp)
int bench_peer_main(int argc, char** argv);       // lockstep bench peer       (cmd_bench_peer.cpp)

/// Every benchmark starts its own local ranks, so it must not itself be one rank of a job (under
/// `lockstep run`, torchrun, srun or mpirun its `lockstep fit` children would join that job instead).
/// Returns 0 when this process stands alone; else prints why to stderr, as "<command>: ...", and
/// returns 2.
int refuse_inside_job(const std::string& command);

/// Parses `app` (CLI11) and reports as every bench command does: returns -1 after a successful parse,
/// 0 after --help (printed to stdout), 2 after a usage error (printed to stderr as
/// "<app's name>: <message>" with a pointer to --help).
int parse_bench_flags(CLI::App& app, int argc, char** argv);

/// A usage error found after parsing: prints "<command>: <message>" and the pointer to --help, returns 2.
int bench_usage_error(const std::string& command, const std::string& message);

}  // namespace lockstep::cli
