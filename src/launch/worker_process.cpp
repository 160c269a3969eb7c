#include "worker_process.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>

#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

// Why not posix_spawn: a worker must die with its launcher (PR_SET_PDEATHSIG), which only the child
// itself can ask for between fork and exec, and posix_spawn has no hook there. So this is what glibc's
// posix_spawn does inside, with that one call added: clone(CLONE_VM | CLONE_VFORK) on a stack of the
// child's own (no copy of the launcher's page tables; the launcher waits until the exec), every signal
// blocked around it so that no handler of the launcher runs in the child, the child resetting caught
// handlers to SIG_DFL before it unblocks anything, and an exec failure reported through shared memory.

namespace lockstep::launch::detail {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void make_pipe(UniqueFd& read_end, UniqueFd& write_end, const char* what = "output") {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw LaunchError(std::string("cannot create a pipe for a worker's ") + what + ": " + error_text(errno));
  }
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
}

// What the child needs; it lives on the launcher's stack, which the child shares until its exec.
struct ChildPlan {
  const char* path;
  char* const* argv;
  char* const* envp;
  pid_t parent;
  int out_fd;  // -1: keep the launcher's stdout
  int err_fd;
  int heartbeat_from;  // -1: none
  int heartbeat_to;
  bool null_stdin;
  bool default_sigpipe;
  int first_closed;
  sigset_t ignored;  // signals the launcher ignores that the worker must not (SIGPIPE when asked)
  volatile int error;
};

int child_main(void* arg) {
  auto* plan = static_cast<ChildPlan*>(arg);
  // Caught handlers back to SIG_DFL first (the launcher's would run on shared memory); ignored ones stay
  // ignored across exec, as with posix_spawn, except those the plan resets.
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    if (::sigaction(sig, nullptr, &sa) != 0) continue;
    const bool ignored = sa.sa_handler == SIG_IGN && !(sa.sa_flags & SA_SIGINFO);
    if ((ignored && !sigismember(&plan->ignored, sig)) || sa.sa_handler == SIG_DFL) continue;
    sa.sa_handler = SIG_DFL;
    sa.sa_flags = 0;
    ::sigaction(sig, &sa, nullptr);
  }
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != plan->parent) {
    plan->error = ESRCH;  // the launcher is gone already (or the kernel refused): do not start orphaned
    ::_exit(127);
  }
  int rc = ::setpgid(0, 0);
  if (rc == 0 && plan->out_fd >= 0) rc = ::dup2(plan->out_fd, STDOUT_FILENO) < 0 ? -1 : 0;
  if (rc == 0) rc = ::dup2(plan->err_fd, STDERR_FILENO) < 0 ? -1 : 0;
  if (rc == 0 && plan->null_stdin) {
    const int fd = ::open("/dev/null", O_RDONLY);
    rc = fd < 0 || ::dup2(fd, STDIN_FILENO) < 0 ? -1 : 0;
  }
  if (rc == 0 && plan->heartbeat_from >= 0) {
    if (plan->heartbeat_from == plan->heartbeat_to) {
      rc = ::fcntl(plan->heartbeat_to, F_SETFD, 0);
    } else {
      rc = ::dup2(plan->heartbeat_from, plan->heartbeat_to) < 0 ? -1 : 0;
    }
  }
  if (rc != 0) {
    plan->error = errno;
    ::_exit(127);
  }
  // Like Python's Popen(close_fds=True): descriptors the embedding program forgot to mark close-on-exec
  // do not leak into workers (ours are all O_CLOEXEC anyway).
#ifdef SYS_close_range
  ::syscall(SYS_close_range, static_cast<unsigned>(plan->first_closed), ~0U, 0U);
#endif
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(plan->path, plan->argv, plan->envp);
  plan->error = errno;
  ::_exit(127);
}

}  // namespace

SpawnedWorker spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const SpawnSettings& settings) {
  SpawnedWorker worker;
  std::string path;
  // The search allocates: it runs here, before the clone, never in the child.
  if (const int error = find_in_path(argv.front(), path); error != 0) {
    worker.error = error;
    return worker;
  }
  UniqueFd out_write, err_write, heartbeat_write;
  if (!settings.inherit_stdout) make_pipe(worker.out, out_write);
  make_pipe(worker.err, err_write);
  if (settings.heartbeat_fd >= 0) make_pipe(worker.heartbeat, heartbeat_write, "heartbeats");

  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(env);
  ChildPlan plan{};
  plan.path = path.c_str();
  plan.argv = c_argv.data();
  plan.envp = c_env.data();
  plan.parent = ::getpid();
  plan.out_fd = settings.inherit_stdout ? -1 : out_write.get();
  plan.err_fd = err_write.get();
  plan.heartbeat_from = settings.heartbeat_fd >= 0 ? heartbeat_write.get() : -1;
  plan.heartbeat_to = settings.heartbeat_fd;
  plan.null_stdin = settings.null_stdin;
  plan.default_sigpipe = settings.default_sigpipe;
  plan.first_closed = std::max(3, settings.heartbeat_fd + 1);
  sigemptyset(&plan.ignored);
  if (settings.default_sigpipe) sigaddset(&plan.ignored, SIGPIPE);
  plan.error = 0;

  constexpr std::size_t kStackBytes = std::size_t{256} * 1024;
  void* stack =
      ::mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED)
    throw LaunchError(std::string("cannot start a worker: mmap: ") + error_text(errno));
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid =
      ::clone(child_main, static_cast<char*>(stack) + kStackBytes, CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kStackBytes);

  if (pid < 0 || plan.error != 0) {
    if (pid > 0) {
      int status;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    worker.error = pid < 0 ? clone_errno : plan.error;
    worker.out.reset();
    worker.err.reset();
    worker.heartbeat.reset();
    return worker;
  }
  worker.pid = pid;
  return worker;  // the write ends close here: the worker holds the only copies
}

}  // namespace lockstep::launch::detail
