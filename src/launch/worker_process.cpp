#include "worker_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <string>
#include <vector>

#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

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

// RAII for the posix_spawn attribute objects.
struct SpawnAttributes {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  SpawnAttributes() {
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&actions);
  }
  ~SpawnAttributes() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
};

}  // namespace

SpawnedWorker spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const SpawnSettings& settings) {
  SpawnedWorker worker;
  UniqueFd out_write, err_write, heartbeat_write;
  if (!settings.inherit_stdout) make_pipe(worker.out, out_write);
  make_pipe(worker.err, err_write);
  if (settings.heartbeat_fd >= 0) make_pipe(worker.heartbeat, heartbeat_write, "heartbeats");

  // posix_spawn rather than fork: glibc starts the child with clone(CLONE_VM | CLONE_VFORK), which does
  // not copy the launcher's page tables, and reports exec failures (ENOENT, EACCES) as its return value.
  SpawnAttributes spawn;
  if (!settings.inherit_stdout)
    posix_spawn_file_actions_adddup2(&spawn.actions, out_write.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&spawn.actions, err_write.get(), STDERR_FILENO);
  if (settings.null_stdin) {
    posix_spawn_file_actions_addopen(&spawn.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  int first_closed = 3;
  if (settings.heartbeat_fd >= 0) {
    // dup2 onto the same number clears close-on-exec (glibc); onto another gives a copy without it.
    posix_spawn_file_actions_adddup2(&spawn.actions, heartbeat_write.get(), settings.heartbeat_fd);
    first_closed = std::max(first_closed, settings.heartbeat_fd + 1);
  }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Like Python's Popen(close_fds=True): descriptors the embedding program forgot to mark close-on-exec
  // do not leak into workers. (Ours are all O_CLOEXEC anyway.)
  posix_spawn_file_actions_addclosefrom_np(&spawn.actions, first_closed);
#endif

  short flags = POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK;
  posix_spawnattr_setpgroup(&spawn.attr, 0);  // own process group, so that a kill reaches its children
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&spawn.attr, &empty);
  if (settings.default_sigpipe) {
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&spawn.attr, &defaults);
    flags |= POSIX_SPAWN_SETSIGDEF;
  }
  posix_spawnattr_setflags(&spawn.attr, flags);

  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(env);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, c_argv[0], &spawn.actions, &spawn.attr, c_argv.data(), c_env.data());
  if (rc != 0) {
    worker.error = rc;
    worker.out.reset();
    worker.err.reset();
    worker.heartbeat.reset();
    return worker;
  }
  worker.pid = pid;
  return worker;  // the write ends close here: the worker holds the only copies
}

}  // namespace lockstep::launch::detail
