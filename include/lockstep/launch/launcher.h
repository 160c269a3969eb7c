#pragma once

#include <iostream>
#include <string>

#include "lockstep/launch/launch_config.h"
#include "lockstep/launch/launch_options.h"
#include "lockstep/launch/launch_result.h"

namespace lockstep::launch {

namespace detail {
class SignalRelay;
}

/// Where a `Launcher` writes. Each worker's stdout lines go to `out` and its stderr lines to `err`, each
/// complete line prefixed "[rank N] "; the launcher's own messages (failure summary, restarts,
/// forwarded signals) go to `err`, prefixed `tag`. Only the thread in `Launcher::run` writes.
struct LaunchStreams {
  std::ostream* out = &std::cout;
  std::ostream* err = &std::cerr;
  /// What the launcher's own lines start with (the command that runs it).
  std::string tag = "lockstep run: ";
};

/// Starts this node's workers and watches them: torchrun's local agent.
///
/// `run()` starts `nproc_per_node` copies of the command, each in its own process group, with
/// torchrun's environment (`worker_environment`), stdout and stderr read through pipes and forwarded
/// line by line (and to the log files). It then waits:
///  - all workers exit 0: returns exit status 0;
///  - a worker exits non-zero or is killed by a signal: SIGTERM to every worker's process group,
///    SIGKILL to those still alive after the grace period (3 s), remaining output drained, a summary
///    naming the rank, how it ended and its last stderr lines; then restart (up to max_restarts) or
///    return its status (128 + N for signal N);
///  - the launcher gets SIGINT, SIGTERM or SIGHUP: the same signal to every worker, then the same
///    grace/kill (a second signal kills at once); returns 128 + N;
///  - the launcher gets SIGUSR1 (Slurm's `--signal=USR1@90` preemption notice): SIGUSR1 to every
///    worker's process group and nothing else; the workers decide (lockstep's Trainer writes a checkpoint
///    at the next step and exits 75), and the job is not restarted after it: their status is returned.
/// A command that cannot be started returns 127 (not found) or 126 (not executable), naming it.
///
/// While `run()` runs it owns the process's SIGCHLD, SIGINT, SIGTERM, SIGHUP and SIGUSR1 handlers (signals
/// that were ignored when it started stay ignored) and ignores SIGPIPE, restoring all of them when it
/// returns. Hence one `run()` per process at a time (a second concurrent one throws `LaunchError`).
/// It reaps only its own workers' pids, never other children of the process.
///
/// Example:
///   Launcher launcher(LaunchOptions({"./train"}).nproc_per_node(4).standalone(true));
///   return launcher.run().exit_status;
class Launcher {
 public:
  /// Resolves `options` (throws `LaunchError` on a bad value; see `resolve`).
  explicit Launcher(const LaunchOptions& options, LaunchStreams streams = {});
  explicit Launcher(LaunchConfig config, LaunchStreams streams = {});

  const LaunchConfig& config() const { return config_; }

  /// Runs the workers to completion (see the class comment). Blocks. Throws `LaunchError` when the
  /// launch cannot start (log directory or pipes cannot be created); worker failures are reported in
  /// the result, not thrown.
  LaunchResult run();

 private:
  LaunchResult run_rounds(detail::SignalRelay& relay, const std::string& job_log_dir);
  /// One node, in-place recovery (LaunchOptions::in_place): one attempt, lost workers announced.
  LaunchResult run_in_place(detail::SignalRelay& relay, const std::string& job_log_dir);

  LaunchConfig config_;
  LaunchStreams streams_;
};

}  // namespace lockstep::launch
