#pragma once

// Helpers for the launch tests: run a program with a deadline, capture its output, look at processes.
// Every wait has a timeout, so a broken launcher fails a test instead of hanging it.

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/wait_until.h"

extern char** environ;

namespace lockstep::launch::testing {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// A fresh directory under $TMPDIR, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "lockstep_launch_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::multiset<std::string> line_set(const std::string& text) {
  const auto lines = lines_of(text);
  return {lines.begin(), lines.end()};
}

/// Whether `pid` is a live process (zombies count as dead: in a container nobody may reap them).
inline bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return false;
  const char state = stat[close_paren + 2];
  return state != 'Z' && state != 'X';
}

using lockstep::testing::wait_until;

/// The one job directory `log_dir` holds for run id `run_id` (torchrun's layout: <run_id>_<random>), or
/// "" when there is none or more than one.
inline std::string job_log_dir(const std::string& log_dir, const std::string& run_id) {
  std::string found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(log_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(run_id + "_", 0) != 0 || name.size() != run_id.size() + 7) continue;
    if (!found.empty()) return "";
    found = entry.path().string();
  }
  return found;
}

/// A program started with stdout and stderr redirected to files.
class Subprocess {
 public:
  explicit Subprocess(const std::vector<std::string>& argv)
      : out_path_(dir_ / "stdout"), err_path_(dir_ / "stderr") {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::vector<char*> c_argv;
    for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    started_ = Clock::now();
    if (::posix_spawnp(&pid_, c_argv[0], &actions, nullptr, c_argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Subprocess() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, 0);
    }
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int signal) const { ::kill(pid_, signal); }

  /// Waits up to `timeout`; kills the process when it is still running then (timed_out() turns true).
  /// Returns the exit status (128 + N for a signal), like a shell.
  int wait(std::chrono::milliseconds timeout) {
    if (status_) return *status_;
    int status = 0;
    const bool done = wait_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
    if (!done) {
      timed_out_ = true;
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    elapsed_ = Clock::now() - started_;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return *status_;
  }

  bool timed_out() const { return timed_out_; }
  /// From start to the end of `wait`.
  double elapsed_s() const { return std::chrono::duration<double>(elapsed_).count(); }
  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }

 private:
  TempDir dir_;
  std::string out_path_;
  std::string err_path_;
  pid_t pid_ = -1;
  Clock::time_point started_;
  Clock::duration elapsed_{};
  std::optional<int> status_;
  bool timed_out_ = false;
};

}  // namespace lockstep::launch::testing
