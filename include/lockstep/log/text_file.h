#pragma once

#include <filesystem>
#include <string>

namespace lockstep::log {

/// Writes `content` to `path` atomically: into a temporary file in the same directory, then renamed over
/// `path`, so a reader sees the old file or the new one, never half of one, and a failure leaves nothing
/// behind. Throws std::runtime_error "cannot write PATH: REASON" (a directory, no such directory, no
/// permission, a full disk).
void write_file_atomically(const std::filesystem::path& path, const std::string& content);

}  // namespace lockstep::log
