// `lockstep bench allreduce`: starts --nproc local ranks of the helper program lockstep-bench-allreduce
// (bench/allreduce_bench.cpp, which links LibTorch) through the launcher, or through mpirun for
// --backend mpi (whose ranks must be MPI's); rank 0 prints the table.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_commands.h"
#include "child_process.h"
#include "install_paths.h"
#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch.h"

namespace lockstep::cli {
namespace {

constexpr const char* kAllreduceName = "lockstep bench allreduce";
constexpr const char* kProgram = "lockstep-bench-allreduce";
constexpr const char* kProgramEnv = "LOCKSTEP_BENCH_ALLREDUCE_PROGRAM";

constexpr const char* kAllreduceDescription =
    "All-reduce (sum, float32) latency and bandwidth per message size, --nproc local ranks on\n"
    "loopback. For each size it times, in the same run and in alternating rounds:\n"
    "  lockstep  lockstep::comm::ProcessGroup::all_reduce(t).wait() with --backend\n"
    "  baseline  raw c10d ProcessGroupGloo allreduce({t})->wait() (LibTorch's own call): over the\n"
    "            same group for gloo, else over a second, Gloo group sharing the first one's store\n"
    "and prints one markdown row per size: iterations, then for both paths the latency (the slowest\n"
    "rank's mean per call, us), algbw = bytes / latency and busbw = algbw * 2 (n - 1) / n\n"
    "(nccl-tests' definitions, GB/s), and ratio = lockstep latency / baseline latency (below 1:\n"
    "lockstep is faster).\n"
    "Sizes run from --min-size to --max-size, each --factor times the previous. Sizes up to 1 MiB\n"
    "time --iters calls per path, larger ones fewer (iters * 1 MiB / size, at least 5).\n"
    "Both paths reduce the same tensor, made by ProcessGroup::new_comm_buffer as DDP's gradient\n"
    "buckets are (--buffer comm: with shm it lives in shared memory and is reduced without copies)\n"
    "or by at::zeros (--buffer plain: shm copies it through its segment).\n"
    "With --backend mpi the ranks are started by mpirun (Open MPI, found in PATH) instead of the\n"
    "launcher, on 127.0.0.1 with a free MASTER_PORT for lockstep's store; the baseline is still Gloo.";

constexpr const char* kAllreduceFooter =
    "SIZE: a byte count with an optional unit B, K, M or G (powers of 1024; KiB, MiB, GiB and KB,\n"
    "MB, GB mean the same), a multiple of 4 (float32), e.g. 4K, 64M.\n"
    "The ranks are the program lockstep-bench-allreduce (next to lockstep in the build tree,\n"
    "libexec/lockstep/ when installed; LOCKSTEP_BENCH_ALLREDUCE_PROGRAM overrides), started like\n"
    "`lockstep run --standalone`; it also runs alone under `lockstep run` with the same flags.\n"
    "\n"
    "Examples:\n"
    "  lockstep bench allreduce\n"
    "  lockstep bench allreduce --nproc 4 --backend shm --max-size 16M --json allreduce.jsonl\n"
    "  lockstep bench allreduce --backend mpi --min-size 40M --max-size 40M --iters 20\n"
    "  lockstep bench allreduce --min-size 1M --max-size 64M --factor 2 --iters 20\n"
    "Exit status: 0 on success, 1 when a rank fails (its error is printed with its rank), 2 for bad\n"
    "flags.";

// The first executable `name` in PATH, or "".
std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// MPI's ranks must be started by mpirun: the launcher's processes would each be an MPI world of one.
// lockstep's store still needs a rendezvous address, which mpirun does not give: 127.0.0.1 and a free port.
int run_under_mpirun(const std::vector<std::string>& command, int nproc) {
  const std::string mpirun = find_in_path("mpirun");
  if (mpirun.empty()) {
    std::cerr << kAllreduceName
              << ": --backend mpi starts its ranks with mpirun, which is not in PATH (Debian: "
                 "apt-get install openmpi-bin)\n";
    return 127;
  }
  try {
    std::vector<std::string> argv{mpirun, "-np", std::to_string(nproc)};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");  // Open MPI refuses root otherwise
    if (nproc > launch::detail::online_cpu_count()) argv.push_back("--oversubscribe");
    argv.insert(argv.end(), {"-x", "MASTER_ADDR=127.0.0.1", "-x",
                             "MASTER_PORT=" + std::to_string(launch::detail::find_free_port())});
    argv.insert(argv.end(), command.begin(), command.end());
    return run_child(argv);
  } catch (const std::exception& e) {
    std::cerr << kAllreduceName << ": " << e.what() << '\n';
    return 1;
  }
}

}  // namespace

int bench_allreduce_main(int argc, char** argv) {
  CLI::App app(kAllreduceDescription, kAllreduceName);
  app.footer(kAllreduceFooter);
  app.get_formatter()->column_width(30);
  int nproc = 2;
  int iters = 50;
  int factor = 4;
  std::string backend = "auto";
  std::string min_size = "4K";
  std::string max_size = "64M";
  std::string json;
  std::string buffer = "comm";
  std::string op = "allreduce";
  app.add_option("--nproc", nproc, "Local ranks (processes)")->capture_default_str();
  app.add_option("--backend", backend,
                 "Backend of lockstep's ProcessGroup: a name that\n"
                 "lockstep::comm::parse_backend accepts; auto: the\n"
                 "one lockstep picks for this job (the table's\n"
                 "first line names it). The messages are CPU\n"
                 "tensors, so not nccl. mpi: ranks started by mpirun.\n"
                 "The baseline is always raw c10d Gloo")
      ->type_name("auto|gloo|shm|hier|mpi")
      ->capture_default_str();
  app.add_option("--min-size", min_size, "Smallest message")->type_name("SIZE")->capture_default_str();
  app.add_option("--max-size", max_size, "Largest message")->type_name("SIZE")->capture_default_str();
  app.add_option("--factor", factor, "Each size is the previous one times F (>= 2)")
      ->type_name("F")
      ->capture_default_str();
  app.add_option("--iters", iters, "Timed calls per path for sizes up to 1 MiB")->capture_default_str();
  app.add_option("--json", json, "Also write one JSON object per size to FILE")->type_name("FILE.jsonl");
  app.add_option("--buffer", buffer,
                 "Where the message lives: comm (new_comm_buffer,\n"
                 "as DDP's buckets) or plain (at::zeros)")
      ->type_name("comm|plain")
      ->capture_default_str();
  app.add_option("--op", op,
                 "allreduce, or reduce-scatter: lockstep's path\n"
                 "reduce-scatters the message (each rank gets\n"
                 "1/N; ZeRO-2 and FSDP send their gradients so),\n"
                 "the baseline still all-reduces it")
      ->type_name("allreduce|reduce-scatter")
      ->capture_default_str();
  if (const int status = parse_bench_flags(app, argc, argv); status >= 0) return status;
  if (nproc < 1)
    return bench_usage_error(kAllreduceName, "--nproc must be >= 1, got " + std::to_string(nproc));
  if (iters < 1)
    return bench_usage_error(kAllreduceName, "--iters must be >= 1, got " + std::to_string(iters));
  if (factor < 2)
    return bench_usage_error(kAllreduceName, "--factor must be >= 2, got " + std::to_string(factor));
  if (buffer != "comm" && buffer != "plain") {
    return bench_usage_error(kAllreduceName, "--buffer must be comm or plain, got '" + buffer + "'");
  }
  if (const int status = refuse_inside_job(kAllreduceName); status != 0) return status;

  const std::string program = find_helper_program(kProgram, kProgramEnv);
  if (program.empty()) {
    std::cerr << kAllreduceName << ": cannot find the program '" << kProgram
              << "' next to this executable or in ../libexec/lockstep/ (it is built with "
                 "-DLOCKSTEP_BUILD_BENCH=ON, the default; or set "
              << kProgramEnv << " to its path)\n";
    return 127;
  }
  if (::access(program.c_str(), X_OK) != 0) {
    std::cerr << kAllreduceName << ": cannot execute '" << program << "' (" << std::strerror(errno) << ")"
              << (std::getenv(kProgramEnv) != nullptr ? std::string(", from ") + kProgramEnv : std::string())
              << '\n';
    return 127;
  }
  // clang-format off
  std::vector<std::string> flags{"--backend", backend,
                                 "--min-size", min_size,
                                 "--max-size", max_size,
                                 "--factor", std::to_string(factor),
                                 "--iters", std::to_string(iters),
                                 "--buffer", buffer,
                                 "--op", op};
  // clang-format on
  if (!json.empty()) flags.insert(flags.end(), {"--json", json});

  // The sizes, the backend name (this LibTorch's parse_backend) and the --json file are checked by the
  // program itself, once, before any rank starts: a bad value fails in one clean message, exit 2.
  std::vector<std::string> check{program, "--check-flags"};
  check.insert(check.end(), flags.begin(), flags.end());
  try {
    if (const int status = run_child(check); status != 0) return status;
  } catch (const std::exception& e) {
    std::cerr << kAllreduceName << ": " << e.what() << '\n';
    return 127;
  }

  std::vector<std::string> command{program};
  command.insert(command.end(), flags.begin(), flags.end());
  if (backend == "mpi") return run_under_mpirun(command, nproc);
  try {
    launch::LaunchOptions options(command);
    options.nproc_per_node(nproc).standalone(true).direct_stdout_local_rank(0);
    launch::Launcher launcher(options);
    return launcher.run().exit_status;
  } catch (const launch::LaunchError& e) {
    std::cerr << kAllreduceName << ": " << e.what() << '\n';
    return 1;
  }
}

}  // namespace lockstep::cli
