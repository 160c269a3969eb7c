#pragma once

#include <string>

namespace lockstep::cli {

/// A program the CLI runs but does not link (it loads LibTorch): `$env_var` when set and non-empty,
/// else `name` next to this executable (the build tree: build/lockstep, build/lockstep-fit, ...), else
/// ../libexec/lockstep/`name` (the install tree: bin/lockstep, libexec/lockstep/lockstep-fit). Empty when
/// none of them is executable.
///
/// Example:
///   find_helper_program("lockstep-bench-allreduce", "LOCKSTEP_BENCH_ALLREDUCE_PROGRAM")
std::string find_helper_program(const std::string& name, const char* env_var);

/// A file that lockstep installs under share/lockstep/: `$env_var` when set and non-empty, else
/// share/lockstep/`relative` next to this executable (the build tree keeps a copy there), else
/// ../share/lockstep/`relative` (the install tree). Empty when none of them exists.
///
/// Example:
///   find_data_file("peer/ddp_peer.py", "LOCKSTEP_PEER_SCRIPT")
std::string find_data_file(const std::string& relative, const char* env_var);

/// getenv(name) when it is set and not empty, else nullptr.
const char* nonempty_env(const char* name);

/// This executable's absolute path (/proc/self/exe), or empty when it cannot be read.
std::string self_executable();

}  // namespace lockstep::cli
