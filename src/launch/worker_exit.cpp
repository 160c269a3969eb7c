#include "lockstep/launch/worker_exit.h"

#include <sys/wait.h>

#include <csignal>
#include <string>
#include <vector>

#include "lockstep/detail/join.h"
#include "lockstep/launch/launch_error.h"
#include "lockstep/launch/launch_options.h"

namespace lockstep::launch {

WorkerExit WorkerExit::from_wait_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return signaled(WTERMSIG(wait_status));
  if (WIFEXITED(wait_status)) return exited(WEXITSTATUS(wait_status));
  return exited(wait_status);  // not a termination status; reported as-is
}

std::string WorkerExit::describe() const {
  if (signal_) return "killed by signal " + std::to_string(code_) + " (" + signal_name(code_) + ")";
  return "exited with status " + std::to_string(code_);
}

std::string signal_name(int signal) {
  struct Named {
    int number;
    const char* name;
  };
  static constexpr Named kSignals[] = {
      {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"},     {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"},     {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
      {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
      {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGSYS, "SIGSYS"},
  };
  for (const Named& s : kSignals) {
    if (s.number == signal) return s.name;
  }
  return "SIG" + std::to_string(signal);
}

std::vector<int> default_signals_to_handle() {
  return {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1};
}

std::vector<int> parse_signals(const std::string& text) {
  static constexpr int kHandleable[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  std::vector<int> signals;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
    bool known = false;
    for (int signal : kHandleable) {
      if (signal_name(signal) != name) continue;
      known = true;
      bool seen = false;
      for (int s : signals) seen = seen || s == signal;
      if (!seen) signals.push_back(signal);
    }
    if (!known) {
      throw LaunchError(
          "signals_to_handle='" + text + "': '" +
          text.substr(start, comma == std::string::npos ? std::string::npos : comma - start) +
          "' is not a signal the launcher can handle (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)");
    }
    if (comma == std::string::npos) return signals;
    start = comma + 1;
  }
}

std::string signal_list_text(const std::vector<int>& signals) {
  return lockstep::detail::join(signals, ",", signal_name);
}

}  // namespace lockstep::launch
