#pragma once

// Joining texts for messages and files ("a, b, c"), in one place. Header-only and torch-free, so every layer
// and the CLI can use it.

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>

namespace lockstep::detail {

/// The items of `items` (any range of things `std::string +=` accepts), separated by `separator`; "" when
/// there are none. Empty items keep their separators ("a,,b").
///
/// Example:
///   join(std::vector<std::string>{"gloo", "nccl"}, ", ")  // "gloo, nccl"
template <typename Range>
std::string join(const Range& items, std::string_view separator) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += separator;
    first = false;
    out += item;
  }
  return out;
}

/// The texts `to_text(item)` of the items of `items`, separated by `separator`.
///
/// Example:
///   join(metrics, ", ", [](const auto& entry) { return entry.first; })  // the keys of a map
template <typename Range, typename ToText>
std::string join(const Range& items, std::string_view separator, ToText&& to_text) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += separator;
    first = false;
    out += to_text(item);
  }
  return out;
}

/// join of at most the first `limit` items; when there are more, ", ... (N in all)" follows (with
/// `separator` in place of ", "), so a message about 10000 ranks stays one line.
///
/// Example:
///   join_first(std::vector<int>{3, 5, 8}, 2, ", ", [](int r) { return std::to_string(r); })
///   // "3, 5, ... (3 in all)"
template <typename Range, typename ToText>
std::string join_first(const Range& items, std::size_t limit, std::string_view separator, ToText&& to_text) {
  std::string out;
  std::size_t count = 0;
  for (const auto& item : items) {
    if (count == limit) {
      out += separator;
      out += "...";
    }
    if (count >= limit) {
      ++count;
      continue;
    }
    if (count > 0) out += separator;
    out += to_text(item);
    ++count;
  }
  if (count > limit) out += " (" + std::to_string(count) + " in all)";
  return out;
}

}  // namespace lockstep::detail
