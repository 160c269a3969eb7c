#pragma once

#include <string>
#include <vector>

namespace lockstep::cli {

/// Where a child's output goes. An empty path keeps this process's stream (the terminal, usually).
struct ChildOutput {
  std::string stdout_path;  ///< created or truncated
  std::string stderr_path;  ///< created or truncated
};

/// Runs `argv` (argv[0] is the program's path; no PATH lookup) as a child process with this process's
/// environment and working directory, and waits for it. Returns its status as a shell reports it: the
/// exit code, or 128 + N when signal N killed it.
///
/// Throws std::runtime_error naming the program (or the output file) when it cannot be started.
///
/// Example:
///   const int status = run_child({"/usr/bin/python3", "-c", "import torch"}, {"/dev/null", "/dev/null"});
int run_child(const std::vector<std::string>& argv, const ChildOutput& output = {});

/// `argv` as one line a user could paste into a shell (arguments with spaces or quotes single-quoted).
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace lockstep::cli
