#include "lockstep/launch/worker_exit.h"

#include <sys/wait.h>

#include <csignal>
#include <string>

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

}  // namespace lockstep::launch
