#pragma once

// Names of the shm backend's segments in /dev/shm, shared by comm/shm (which creates them) and launch
// (which removes what a crashed job left behind). Header-only and torch-free so the launcher can use it.

#include <string>

namespace lockstep::detail {

/// "lockstep-<run id>-": the start of every segment name of a job, with characters other than
/// [A-Za-z0-9_.-] replaced by '_' and the run id cut at 200 bytes (segment names are file names).
inline std::string shm_segment_prefix(const std::string& run_id) {
  std::string clean;
  for (char c : run_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    clean += ok ? c : '_';
    if (clean.size() >= 200) break;
  }
  return "lockstep-" + clean + "-";
}

/// "lockstep-<run id>-<pid>-": the segments created by the process `pid` (rank 0 of a group) of a job.
inline std::string shm_segment_prefix(const std::string& run_id, long pid) {
  return shm_segment_prefix(run_id) + std::to_string(pid) + "-";
}

}  // namespace lockstep::detail
