#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "unique_fd.h"

namespace lockstep::launch::detail {

/// How workers are started (the same for every worker of a launch).
struct SpawnSettings {
  /// Give the worker /dev/null as stdin (used when the launcher's stdin is a terminal: a worker in its
  /// own process group that reads the terminal would be stopped by SIGTTIN).
  bool null_stdin = false;
  /// Reset SIGPIPE to SIG_DFL in the worker (the launcher ignores it, workers must not inherit that).
  bool default_sigpipe = true;
  /// Leave the worker's stdout as the launcher's (no pipe; SpawnedWorker::out stays invalid).
  bool inherit_stdout = false;
  /// Give the worker the write end of a heartbeat pipe as descriptor `heartbeat_fd` (-1: none).
  int heartbeat_fd = -1;
};

/// A started worker: its pid (= its process group id) and the read ends of its stdout and stderr pipes
/// (non-blocking, close-on-exec). `error` is the errno of a failed start (then pid is -1).
struct SpawnedWorker {
  pid_t pid = -1;
  UniqueFd out;
  UniqueFd err;
  UniqueFd heartbeat;  ///< read end of the heartbeat pipe (when SpawnSettings::heartbeat_fd >= 0)
  int error = 0;
};

/// Starts `argv` (looked up in PATH like execvp) with environment `env`, as the leader of a new process
/// group, with an empty signal mask, stdout and stderr into new pipes and no other inherited file
/// descriptor beyond 0-2 (and the heartbeat pipe's write end, when asked for). The worker gets SIGKILL
/// when the calling thread ends (PR_SET_PDEATHSIG): a worker never outlives its launcher, even one killed
/// with SIGKILL. Throws LaunchError when the pipes cannot be created; an exec failure (ENOENT, EACCES,
/// ...) is returned in `error`.
SpawnedWorker spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const SpawnSettings& settings);

}  // namespace lockstep::launch::detail
