#pragma once

// The log layer's file helpers (private: src/log only). Every error names the path and the system's reason.

#include <string>

namespace lockstep::log::detail {

/// Creates `dir` with its parents (nothing when it exists). Throws std::runtime_error naming it.
void create_log_dir(const std::string& dir);

/// Throws std::runtime_error "<action> '<path>' failed: <strerror(errno)>".
[[noreturn]] void throw_io_error(const std::string& action, const std::string& path);

/// The shortest text that reads back as `value` ("0.1", "3", "1e-05", "-inf", "nan").
std::string shortest_text(double value);

}  // namespace lockstep::log::detail
