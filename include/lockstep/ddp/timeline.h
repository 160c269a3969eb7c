#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace lockstep::ddp {

/// A Chrome-trace recorder (chrome://tracing, Perfetto): DDP records backward start/end and, per bucket,
/// ready / all-reduce start / all-reduce end, which shows how much communication overlaps backward.
/// Enabled by LOCKSTEP_TIMELINE=path.json: each rank writes `path` with ".rank<N>" before the extension
/// (or `%r` in the path replaced by the rank). Thread-safe: collectives finish on backend threads.
class Timeline {
 public:
  /// Disabled timeline (records nothing).
  Timeline() = default;
  /// Records, and writes to `path` on flush() / destruction.
  Timeline(std::string path, int rank);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// The per-rank path for LOCKSTEP_TIMELINE, or "" when it is unset.
  static std::string path_from_env(int rank);

  bool enabled() const { return !path_.empty(); }
  /// Begin/end of a span on track `track` (0 = backward thread, 1 = communication).
  void begin(const std::string& name, int track);
  void end(const std::string& name, int track);
  /// A point event.
  void instant(const std::string& name, int track);
  /// Writes the events recorded so far (atomically: temporary file + rename). Throws on I/O errors.
  void flush();

  struct Event {
    std::string name;
    char phase;  // 'B', 'E', 'i'
    int64_t ts_us;
    int track;
  };
  std::vector<Event> events() const;

 private:
  void add(const std::string& name, char phase, int track);

  std::string path_;
  int rank_ = 0;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  mutable std::mutex mutex_;
  std::vector<Event> events_;
};

}  // namespace lockstep::ddp
