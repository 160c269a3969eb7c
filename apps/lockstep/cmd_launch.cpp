// `lockstep launch`: `accelerate launch`'s command line (accelerate_flags.h) in front of
// lockstep::launch::Launcher, as `lockstep run` puts torchrun's there.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "accelerate_flags.h"
#include "cli_parse.h"
#include "commands.h"
#include "flag_words.h"
#include "lockstep/launch/launch.h"

namespace lockstep::cli {
namespace launch_command {  // named: the CLI is a unity build
namespace {

constexpr const char* kLaunchDescription =
    "Hugging Face Accelerate's `accelerate launch`, for Python Accelerate scripts and C++ programs built on\n"
    "lockstep::train::Accelerator: start the workers of this machine, each with torchrun's environment\n"
    "(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...: lockstep run --help) and the variables Accelerate's\n"
    "launcher sets (ACCELERATE_MIXED_PRECISION, ...), which the program's Accelerator reads where the\n"
    "program left a setting to the launcher. SCRIPT ending in .py runs under Python (PYTHON_EXEC, else\n"
    "python3 from PATH), any other is executed; everything after SCRIPT is its own arguments.\n"
    "Output lines are prefixed \"[rank N] \"; when one worker fails the others are stopped.";

constexpr const char* kLaunchFooter =
    "\n"
    "Exit status: 0 when every worker succeeded, else the first failing worker's (128+N: killed by\n"
    "signal N); 127/126: SCRIPT not found / not executable; 2: bad flags.\n"
    "\n"
    "Examples:\n"
    "  lockstep launch --num_processes=4 --mixed_precision=fp16 src/train_accelerate.py\n"
    "  lockstep launch --num_processes=2 --mixed_precision=bf16 build/examples/accelerate --epochs 3\n"
    "  # two machines (run one on each):\n"
    "  lockstep launch --num_machines 2 --machine_rank 0 --num_processes 8 --main_process_ip 10.0.0.1 \\\n"
    "                  --main_process_port 29500 train.py\n"
    "  lockstep launch --num_machines 2 --machine_rank 1 --num_processes 8 --main_process_ip 10.0.0.1 \\\n"
    "                  --main_process_port 29500 train.py";

int usage_error(const std::string& message) {
  std::cerr << "lockstep launch: " << message << "\nRun 'lockstep launch --help' for the flags.\n";
  return 2;
}

// Accelerate's `accelerate config` writes defaults that accelerate launch reads; lockstep launch does not.
void note_accelerate_config_file() {
  const char* hf_home = std::getenv("HF_HOME");
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string dir;
  if (hf_home != nullptr && *hf_home != '\0') {
    dir = hf_home;
  } else if (cache != nullptr && *cache != '\0') {
    dir = std::string(cache) + "/huggingface";
  } else if (home != nullptr) {
    dir = std::string(home) + "/.cache/huggingface";
  } else {
    return;
  }
  const std::string file = dir + "/accelerate/default_config.yaml";
  if (std::FILE* f = std::fopen(file.c_str(), "r")) {
    std::fclose(f);
    std::cerr << "lockstep launch: note: " << file
              << " (accelerate config's defaults) is not read here; only the flags count\n";
  }
}

}  // namespace
}  // namespace launch_command

int launch_main(int argc, char** argv) {
  namespace lc = launch_command;
  CLI::App app(lc::kLaunchDescription, "lockstep launch");
  app.footer(lc::kLaunchFooter);
  app.prefix_command();  // the first positional and all after it are the worker command
  auto formatter = std::make_shared<CommandFormatter>("[--] SCRIPT [ARGS...]", kAccelerateTable);
  formatter->column_width(36);
  app.formatter(formatter);
  AccelerateFlags flags;
  add_accelerate_flags(app, flags);

  if (const int status = parse_or_status(app, argc, argv, lc::usage_error); status >= 0) return status;
  std::vector<std::string> command;
  if (const auto unknown = take_command(app, command)) {
    return lc::usage_error(
        "unknown option '" + *unknown +
        "' (not a flag of accelerate launch 1.15; the script's own flags go after the script)");
  }
  if (command.empty())
    return lc::usage_error("no script given (usage: lockstep launch [flags] SCRIPT [ARGS...])");

  std::optional<launch::Launcher> launcher;
  try {
    refuse_unsupported_flags(app);
    const AccelerateLaunch plan = accelerate_launch(flags, command, launch::visible_cuda_device_count());
    for (const std::string& warning : plan.warnings)
      std::cerr << "lockstep launch: warning: " << warning << '\n';
    launch::LaunchStreams streams;
    streams.tag = "lockstep launch: ";
    launcher.emplace(plan.options, streams);
  } catch (const UsageError& e) {
    return lc::usage_error(e.message);
  } catch (const launch::LaunchError& e) {
    return lc::usage_error(in_flag_words(e.what(), accelerate_option_flags()));
  }
  lc::note_accelerate_config_file();

  try {
    return launcher->run().exit_status;
  } catch (const launch::LaunchError& e) {
    std::cerr << "lockstep launch: " << in_flag_words(e.what(), accelerate_option_flags()) << '\n';
    return 1;
  }
}

}  // namespace lockstep::cli
