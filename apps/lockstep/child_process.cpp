#include "child_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace lockstep::cli {
namespace {

// Owns a posix_spawn_file_actions_t.
class FileActions {
 public:
  FileActions() { ::posix_spawn_file_actions_init(&actions_); }
  ~FileActions() { ::posix_spawn_file_actions_destroy(&actions_); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;

  void redirect(int fd, const std::string& path) {
    if (path.empty()) return;
    const int status =
        ::posix_spawn_file_actions_addopen(&actions_, fd, path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (status != 0)
      throw std::runtime_error("cannot redirect output to '" + path + "': " + std::strerror(status));
  }
  const posix_spawn_file_actions_t* get() const { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

}  // namespace

int run_child(const std::vector<std::string>& argv, const ChildOutput& output) {
  if (argv.empty()) throw std::invalid_argument("run_child: empty command");
  FileActions actions;
  actions.redirect(STDOUT_FILENO, output.stdout_path);
  actions.redirect(STDERR_FILENO, output.stderr_path);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  pid_t pid = 0;
  const int status = ::posix_spawn(&pid, argv[0].c_str(), actions.get(), nullptr, args.data(), environ);
  if (status != 0) {
    throw std::runtime_error("cannot start '" + argv[0] + "': " + std::strerror(status));
  }
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0) {
    if (errno != EINTR)
      throw std::runtime_error("waitpid for '" + argv[0] + "' failed: " + std::strerror(errno));
  }
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789-_=./,:+@%") == std::string::npos;
    if (plain) {
      line += arg;
    } else {
      line += '\'';
      for (const char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
      line += '\'';
    }
  }
  return line;
}

}  // namespace lockstep::cli
