#pragma once

#include <csignal>
#include <vector>

#include "unique_fd.h"

namespace lockstep::launch::detail {

/// Turns signals into bytes on a pipe that poll() can wait on (the self-pipe trick): the handler only
/// write()s the signal number, which is async-signal-safe, and the launcher's loop does the rest.
///
/// While alive it handles SIGCHLD and the signals it is given (LaunchOptions::signals_to_handle; each
/// only when it was not ignored: a launcher started with `nohup` or in the background keeps ignoring
/// them) and ignores SIGPIPE (a closed stdout must not kill the launcher and orphan its workers). The
/// destructor restores every previous disposition. At most one relay exists per process.
class SignalRelay {
 public:
  /// Throws LaunchError when another relay is alive or the pipe cannot be created.
  explicit SignalRelay(const std::vector<int>& signals);
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  /// Read end of the pipe, for poll().
  int fd() const { return read_fd_.get(); }

  /// The signals that arrived since the last call, in order (repeats of one signal may be merged).
  std::vector<int> take();

  /// Whether SIGPIPE was ignored before the relay ignored it: workers then inherit SIG_IGN, otherwise
  /// they must get SIG_DFL back.
  bool sigpipe_was_ignored() const { return old_pipe_.sa_handler == SIG_IGN; }

 private:
  std::vector<int> handled_;  // SIGCHLD first
  UniqueFd read_fd_;
  UniqueFd write_fd_;
  std::vector<struct sigaction> old_;
  std::vector<bool> installed_;
  struct sigaction old_pipe_ = {};
  sigset_t old_mask_ = {};
};

}  // namespace lockstep::launch::detail
