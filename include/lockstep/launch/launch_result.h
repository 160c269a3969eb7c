#pragma once

#include <optional>

#include "lockstep/launch/worker_exit.h"

namespace lockstep::launch {

/// How a launch ended (`Launcher::run`).
struct LaunchResult {
  /// What `lockstep run` exits with: 0 when every worker succeeded; else the first failing worker's
  /// `WorkerExit::shell_status()` (127 when the command was not found, 126 when it could not be
  /// executed); 128 + N when the launcher itself was stopped by signal N.
  int exit_status = 0;
  /// Global rank of the first worker that failed (in the last attempt), if one did.
  std::optional<int> failed_rank;
  /// How that worker ended.
  std::optional<WorkerExit> failure;
  /// The signal (SIGINT, SIGTERM, SIGHUP) that stopped the launch, if one did.
  std::optional<int> signal;
  /// Restarts performed (TORCHELASTIC_RESTART_COUNT of the last attempt).
  int restarts = 0;

  bool success() const { return exit_status == 0; }
};

}  // namespace lockstep::launch
