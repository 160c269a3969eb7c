#pragma once

// `accelerate launch`'s command line for `lockstep launch` (Hugging Face Accelerate 1.15,
// accelerate/commands/launch.py): the flags that mean something without a config file, in Accelerate's
// spellings (--num_processes and --num-processes, --flag=value and --flag value), turned into the
// launcher's options plus the variables Accelerate's launcher gives its workers (ACCELERATE_MIXED_PRECISION,
// ...: what a Python Accelerate script and lockstep's C++ Accelerator read). Every other flag of
// `accelerate launch` is parsed with Accelerate's arity only to be refused, naming the flag, the reason and
// lockstep's equivalent where there is one. Free of LibTorch, like the CLI.

#include <optional>
#include <string>
#include <vector>

#include "lockstep/launch/launch_options.h"
#include "torchrun_flags.h"

namespace CLI {
class App;
}

namespace lockstep::cli {

/// The values of `lockstep launch`'s flags as given, before checks (integers and seconds stay text, so
/// that a bad one is reported in the flag's words).
struct AccelerateFlags {
  std::optional<std::string> num_processes, num_machines, machine_rank, main_process_ip, main_process_port,
      mixed_precision, gradient_accumulation_steps, num_cpu_threads_per_process, gpu_ids, rdzv_backend,
      rdzv_conf, max_restarts, monitor_interval, log_dir, role, tee, dynamo_backend, job_secret_file;
  bool cpu = false, multi_gpu = false, same_network = false, module = false, no_python = false, debug = false,
       quiet = false, no_job_secret = false;
};

/// Adds `accelerate launch`'s flags to `app`: the ones lockstep honours, storing into `flags`, and the
/// refused ones (hidden from --help's groups; `refuse_unsupported_flags` reports them).
void add_accelerate_flags(CLI::App& app, AccelerateFlags& flags);

/// After app.parse(): throws UsageError (torchrun_flags.h) for the first refused flag given, naming it,
/// why lockstep launch cannot honour it and, where one exists, lockstep's equivalent.
void refuse_unsupported_flags(const CLI::App& app);

/// What `lockstep launch` runs: the launcher's options (worker_env carries Accelerate's variables, and
/// OMP_NUM_THREADS for --num_cpu_threads_per_process, which then stands instead of the launcher's default).
struct AccelerateLaunch {
  launch::LaunchOptions options;
  /// Lines for flags accepted but changing nothing here (an --rdzv_conf key lockstep notes), as lockstep
  /// run warns.
  std::vector<std::string> warnings;
};

/// The launch `flags` ask for, for the worker command `command` (the script and its arguments).
/// `visible_gpus`: the GPUs this node shows (launch::visible_cuda_device_count()); with none, the workers
/// get ACCELERATE_USE_CPU=True (see kAccelerateTable). Throws UsageError naming the flag and the value for
/// a bad one or a bad combination, launch::LaunchError (naming the launcher's option) from the launch
/// layer's parsers (--rdzv_backend, --rdzv_conf, --tee); the launcher checks the rest when it resolves the
/// options.
AccelerateLaunch accelerate_launch(const AccelerateFlags& flags, const std::vector<std::string>& command,
                                   int visible_gpus);

/// Library option names of the launcher and the flags of `lockstep launch` that set them, to put a
/// LaunchError in the command's words (cli::in_flag_words).
const std::vector<std::pair<std::string, std::string>>& accelerate_option_flags();

/// `accelerate launch`'s flags and what lockstep launch does with each: the help's table (also in the
/// README).
extern const char* const kAccelerateTable;

}  // namespace lockstep::cli
