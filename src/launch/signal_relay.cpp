#include "signal_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch::detail {
namespace {

// The handler's only state: where to write. Set before the handlers are installed, cleared after they
// are removed.
volatile std::sig_atomic_t g_relay_write_fd = -1;
std::atomic<bool> g_relay_alive{false};

extern "C" void relay_signal(int signal) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signal);
  const int fd = g_relay_write_fd;
  if (fd >= 0) {
    // Non-blocking: when the pipe is full, enough wake-ups are already queued.
    [[maybe_unused]] const ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

SignalRelay::SignalRelay(const std::vector<int>& signals) : handled_{SIGCHLD} {
  handled_.insert(handled_.end(), signals.begin(), signals.end());
  old_.resize(handled_.size());
  installed_.assign(handled_.size(), false);
  if (g_relay_alive.exchange(true)) {
    throw LaunchError(
        "a Launcher is already running in this process (only one run() at a time: it owns the "
        "SIGCHLD handler and those of the signals it forwards)");
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    g_relay_alive = false;
    throw LaunchError(std::string("cannot create the launcher's signal pipe: ") + error_text(err));
  }
  read_fd_.reset(fds[0]);
  write_fd_.reset(fds[1]);
  g_relay_write_fd = fds[1];

  struct sigaction action {};
  action.sa_handler = relay_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (std::size_t i = 0; i < handled_.size(); ++i) {
    const int signal = handled_[i];
    ::sigaction(signal, nullptr, &old_[i]);
    if (signal != SIGCHLD && old_[i].sa_handler == SIG_IGN) continue;
    action.sa_flags = SA_RESTART | (signal == SIGCHLD ? SA_NOCLDSTOP : 0);
    installed_[i] = ::sigaction(signal, &action, nullptr) == 0;
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);

  // Make sure the relayed signals are not blocked in this thread (they may be in others; any thread
  // that takes them runs the same handler).
  sigset_t set;
  sigemptyset(&set);
  for (int signal : handled_) sigaddset(&set, signal);
  pthread_sigmask(SIG_UNBLOCK, &set, &old_mask_);
}

SignalRelay::~SignalRelay() {
  for (std::size_t i = 0; i < handled_.size(); ++i) {
    if (installed_[i]) ::sigaction(handled_[i], &old_[i], nullptr);
  }
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  g_relay_write_fd = -1;
  g_relay_alive = false;
}

std::vector<int> SignalRelay::take() {
  std::vector<int> signals;
  unsigned char buffer[64];
  for (;;) {
    const ssize_t n = ::read(read_fd_.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      const int signal = buffer[i];
      if (signal == SIGCHLD && !signals.empty() && signals.back() == SIGCHLD) continue;
      signals.push_back(signal);
    }
  }
  return signals;
}

}  // namespace lockstep::launch::detail
