#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace lockstep::launch::detail {

/// Cuts a byte stream (read from a pipe in arbitrary chunks) into lines.
///
/// `feed` hands each complete line, without its '\n', to the callback; bytes after the last '\n' wait
/// for the next chunk. `finish` hands over what is left (a last line without newline). A line longer
/// than `max_line_bytes` is handed over in pieces of that size, so a worker that never writes '\n'
/// cannot make the launcher buffer without bound.
class LineSplitter {
 public:
  using LineCallback = std::function<void(std::string_view line)>;

  static constexpr std::size_t kDefaultMaxLineBytes = std::size_t{64} * 1024;

  explicit LineSplitter(std::size_t max_line_bytes = kDefaultMaxLineBytes);

  void feed(std::string_view bytes, const LineCallback& on_line);
  void finish(const LineCallback& on_line);

  /// Bytes waiting for their '\n'.
  std::size_t pending() const { return partial_.size(); }

 private:
  std::size_t max_line_bytes_;
  std::string partial_;
};

}  // namespace lockstep::launch::detail
