#include "lockstep/launch/detail/line_splitter.h"

#include <string_view>

namespace lockstep::launch::detail {

LineSplitter::LineSplitter(std::size_t max_line_bytes)
    : max_line_bytes_(max_line_bytes > 0 ? max_line_bytes : kDefaultMaxLineBytes) {}

void LineSplitter::feed(std::string_view bytes, const LineCallback& on_line) {
  while (!bytes.empty()) {
    const std::size_t newline = bytes.find('\n');
    const std::size_t take = newline == std::string_view::npos ? bytes.size() : newline;
    const std::size_t room = max_line_bytes_ - partial_.size();
    if (take >= room) {
      // Too long for one line: hand over a full piece and go on with the rest of this line.
      partial_.append(bytes.substr(0, room));
      on_line(partial_);
      partial_.clear();
      bytes.remove_prefix(room);
      // A newline right at the cut ends the line that was just handed over.
      if (take == room && newline != std::string_view::npos) bytes.remove_prefix(1);
      continue;
    }
    if (newline == std::string_view::npos) {
      partial_.append(bytes);
      return;
    }
    if (partial_.empty()) {
      on_line(bytes.substr(0, newline));
    } else {
      partial_.append(bytes.substr(0, newline));
      on_line(partial_);
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

void LineSplitter::finish(const LineCallback& on_line) {
  if (partial_.empty()) return;
  on_line(partial_);
  partial_.clear();
}

}  // namespace lockstep::launch::detail
