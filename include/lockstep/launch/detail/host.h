#pragma once

#include <string>

namespace lockstep::launch::detail {

/// CPU cores online now (sysconf(_SC_NPROCESSORS_ONLN)), at least 1.
int online_cpu_count();

/// A TCP port that was free on `host` (an address of this host) a moment ago: bind to port 0, read the
/// port back, close. Throws LaunchError naming the host when no socket can be bound.
int find_free_port(const std::string& host = "127.0.0.1");

/// This host's name (gethostname), "?" when it cannot be read.
std::string host_name();

/// execvp's search for `name`: a name with '/' as given, else the first executable regular file of that
/// name in PATH's directories (an empty entry is the current directory). Returns 0 and sets `path`, or
/// the errno execvp would give: ENOENT (nowhere), EACCES (found, but not executable).
int find_in_path(const std::string& name, std::string& path);

/// strerror(errnum), thread-safe.
std::string error_text(int errnum);

/// 16 random hex digits from /dev/urandom (a time-and-pid mix where that cannot be read).
std::string random_run_id();

}  // namespace lockstep::launch::detail
