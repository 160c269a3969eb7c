#pragma once

// A c10d::Store holds bytes; comm's keys hold text (private to comm/).

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::comm::detail {

inline std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
inline std::string text(const std::vector<uint8_t>& b) {
  return {b.begin(), b.end()};
}

}  // namespace lockstep::comm::detail
