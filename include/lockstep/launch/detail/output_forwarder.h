#pragma once

#include <cstddef>
#include <deque>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/launch/detail/line_splitter.h"

namespace lockstep::launch::detail {

/// "[rank 3] ": what each forwarded line of rank 3 starts with.
std::string rank_prefix(int rank);

/// Forwards one stream (stdout or stderr) of one worker: raw bytes to the log file, each complete
/// line, prefixed, to `sink` (one write per line, so lines of different workers never interleave), the
/// prefixed lines that contain one of the duplicate filters to the filtered file, and the last
/// `tail_lines` lines kept for the failure summary.
class OutputForwarder {
 public:
  static constexpr std::size_t kDefaultTailLines = 20;
  /// Longer lines are cut in the tail (not in the sink or the log).
  static constexpr std::size_t kMaxTailLineBytes = 1000;

  /// `sink`: where the prefixed lines go, or null for none (a redirected stream); `log_fd`: an open file
  /// descriptor that receives the raw bytes, or -1; not owned.
  OutputForwarder(std::string prefix, std::ostream* sink, int log_fd = -1,
                  std::size_t tail_lines = kDefaultTailLines);
  /// Prefix `rank_prefix(rank)`, shown on `sink`.
  OutputForwarder(int rank, std::ostream& sink, int log_fd = -1, std::size_t tail_lines = kDefaultTailLines);

  /// Lines that contain any of `filters` also go, prefixed, to `fd` (not owned; both must outlive this).
  void duplicate_to(int fd, const std::vector<std::string>* filters);

  /// Bytes just read from the worker's pipe.
  void feed(std::string_view bytes);
  /// The pipe reached EOF: forwards a last line that has no newline.
  void finish();

  const std::deque<std::string>& tail() const { return tail_; }

 private:
  void emit(std::string_view line);

  std::string prefix_;
  std::ostream* sink_;
  int log_fd_;
  int duplicate_fd_ = -1;
  const std::vector<std::string>* filters_ = nullptr;
  std::size_t tail_lines_;
  LineSplitter splitter_;
  std::deque<std::string> tail_;
  std::string buffer_;
};

}  // namespace lockstep::launch::detail
