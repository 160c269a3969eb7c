#pragma once

// torchrun's command line for `lockstep run`: every flag of torchrun (PyPI torch 2.15) in both spellings,
// its PET_* variable as the default, and what lockstep does with it (kTorchrunTable, printed by --help
// and copied into the README). Flags lockstep cannot honour are accepted by the parser only to be
// refused with the reason.

#include <optional>
#include <string>
#include <vector>

#include "lockstep/launch/launch_options.h"

namespace CLI {
class App;
}

namespace lockstep::cli {

/// A usage mistake: printed as "lockstep <command>: <message>", exit status 2.
struct UsageError {
  std::string message;
};

/// The values of `lockstep run`'s flags as given (on the command line, else from PET_*), before checks.
struct RunFlags {
  std::optional<std::string> nnodes, nproc_per_node, rdzv_backend, rdzv_endpoint, rdzv_id, rdzv_conf,
      max_restarts, monitor_interval, start_method, event_log_handler, role, log_dir, redirects, tee,
      log_line_prefix_template, local_ranks_filter, duplicate_stdout_filters, duplicate_stderr_filters,
      node_rank, master_addr, master_port, local_addr, logs_specs, numa_binding, signals_to_handle,
      shutdown_timeout, print_completion, collective_timeout, recovery, heartbeat_timeout, job_secret_file;
  bool no_job_secret = false;
  bool standalone = false, module = false, no_python = false, run_path = false, virtual_local_rank = false;
};

/// Adds torchrun's flags (and lockstep's --collective-timeout) to `app`, each reading its PET_*
/// variable when not given.
void add_torchrun_flags(CLI::App& app, RunFlags& flags);

/// The options the flags ask for, for worker command `command`. Throws UsageError naming the flag and
/// the value for a bad one, or for one lockstep refuses (with the reason). `warnings` receives lines for
/// flags that are accepted but change nothing here, as torchrun warns for them.
launch::LaunchOptions launch_options(RunFlags flags, const std::vector<std::string>& command,
                                     std::vector<std::string>& warnings);

/// torchrun's flags and PET_* variables, and what lockstep run does with each: the help's table.
extern const char* const kTorchrunTable;

/// A flag's integer value, strictly: decimal digits only (no sign, no spaces), at most INT_MAX. The
/// message shows a well-formed integer as is ("--node-rank=-1"), anything else quoted ("--nnodes='+2'").
int parse_int(const std::string& flag, const std::string& text, const char* expected);

/// A positive number of seconds ("30", "0.5") as a duration.
std::chrono::milliseconds parse_seconds(const std::string& flag, const std::string& text);

}  // namespace lockstep::cli
