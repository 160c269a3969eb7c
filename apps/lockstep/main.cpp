// lockstep — data-parallel training for LibTorch. Entry point: dispatches to a subcommand.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"

namespace {

constexpr const char* kUsage =
    "lockstep — data-parallel training for LibTorch\n"
    "\n"
    "usage: lockstep <command> [options]\n"
    "\n"
    "commands:\n"
    "  run    start N local workers with torchrun's environment (torchrun's flags)\n"
    "  launch start N local workers as `accelerate launch` does (Accelerate's flags): torchrun's\n"
    "         environment and ACCELERATE_MIXED_PRECISION, ... for Python and C++ Accelerate programs\n"
    "  fit    train a ready model (mlp, cnn, resnet18) on Fashion-MNIST, MNIST, CIFAR-10 or\n"
    "         synthetic data, or a GPT on text, with N data-parallel ranks (Lightning's flags)\n"
    "  env    print who this process is (rank, world size, master) as lockstep reads it\n"
    "  bench  benchmarks against a baseline measured in the same run: allreduce (lockstep's\n"
    "         process group vs raw c10d Gloo), scaling (lockstep fit at 1, 2, ... ranks),\n"
    "         peer (lockstep fit vs the Python DDP peer)\n"
    "  export convert a checkpoint (last.ckpt, a --save-top-k file) or final.pt of `lockstep fit`\n"
    "         into safetensors (Python reads it with json + numpy or the safetensors package)\n"
    "  slurm  write an sbatch script for a Slurm job (torchrun, ddp or lightning shape) with\n"
    "         preemption (SIGUSR1 -> checkpoint, exit 75) and requeue wired in\n"
    "  report write one self-contained HTML page of a run dir: loss, accuracy, throughput,\n"
    "         memory, the per-rank step breakdown, bench tables, the configuration\n"
    "\n"
    "`lockstep <command> --help` describes each command.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version") {
    std::puts("lockstep " LOCKSTEP_VERSION);
    return 0;
  }
  if (command == "run") return lockstep::cli::run_main(argc - 1, argv + 1);
  if (command == "launch") return lockstep::cli::launch_main(argc - 1, argv + 1);
  if (command == "env") return lockstep::cli::env_main(argc - 1, argv + 1);
  if (command == "fit") return lockstep::cli::fit_main(argc - 1, argv + 1);
  if (command == "bench") return lockstep::cli::bench_main(argc - 1, argv + 1);
  if (command == "export") return lockstep::cli::export_main(argc - 1, argv + 1);
  if (command == "slurm") return lockstep::cli::slurm_main(argc - 1, argv + 1);
  if (command == "report") return lockstep::cli::report_main(argc - 1, argv + 1);
  std::fprintf(stderr,
               "lockstep: unknown command '%s' (expected one of: run, launch, fit, env, bench, export, "
               "slurm, report)\n\n%s",
               command.c_str(), kUsage);
  return 2;
}
