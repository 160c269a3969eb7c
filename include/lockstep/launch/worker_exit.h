#pragma once

#include <string>

namespace lockstep::launch {

/// How a worker process ended.
///
/// Example:
///   WorkerExit::signaled(9).describe()     // "killed by signal 9 (SIGKILL)"
///   WorkerExit::signaled(9).shell_status() // 137
class WorkerExit {
 public:
  /// Ended with `exit(status)` / return from main.
  static WorkerExit exited(int status) { return WorkerExit(false, status); }
  /// Killed by signal `signal`.
  static WorkerExit signaled(int signal) { return WorkerExit(true, signal); }
  /// Decodes a status from waitpid (WIFEXITED / WIFSIGNALED).
  static WorkerExit from_wait_status(int wait_status);

  bool is_signal() const { return signal_; }
  /// The exit status, or the signal number when `is_signal()`.
  int code() const { return code_; }
  bool success() const { return !signal_ && code_ == 0; }

  /// The status a shell would report: the exit status, or 128 + signal.
  int shell_status() const { return signal_ ? 128 + code_ : code_; }

  /// "exited with status 3" or "killed by signal 9 (SIGKILL)".
  std::string describe() const;

 private:
  WorkerExit(bool signal, int code) : signal_(signal), code_(code) {}
  bool signal_ = false;
  int code_ = 0;
};

/// "SIGKILL" for 9 etc.; "SIG<n>" for numbers without a name.
std::string signal_name(int signal);

}  // namespace lockstep::launch
