#pragma once

#include <cstddef>
#include <deque>
#include <ostream>
#include <string>
#include <string_view>

#include "lockstep/launch/detail/line_splitter.h"

namespace lockstep::launch::detail {

/// "[rank 3] ": what each forwarded line of rank 3 starts with.
std::string rank_prefix(int rank);

/// Forwards one stream (stdout or stderr) of one worker: raw bytes to the log file, each complete
/// line, prefixed with `rank_prefix(rank)`, to `sink` (one write per line, so lines of different
/// workers never interleave), and the last `tail_lines` lines kept for the failure summary.
class OutputForwarder {
 public:
  static constexpr std::size_t kDefaultTailLines = 20;
  /// Longer lines are cut in the tail (not in the sink or the log).
  static constexpr std::size_t kMaxTailLineBytes = 1000;

  /// `log_fd`: an open file descriptor that receives the raw bytes, or -1; not owned.
  OutputForwarder(int rank, std::ostream& sink, int log_fd = -1, std::size_t tail_lines = kDefaultTailLines);

  /// Bytes just read from the worker's pipe.
  void feed(std::string_view bytes);
  /// The pipe reached EOF: forwards a last line that has no newline.
  void finish();

  const std::deque<std::string>& tail() const { return tail_; }

 private:
  void emit(std::string_view line);

  std::string prefix_;
  std::ostream& sink_;
  int log_fd_;
  std::size_t tail_lines_;
  LineSplitter splitter_;
  std::deque<std::string> tail_;
  std::string buffer_;
};

}  // namespace lockstep::launch::detail
