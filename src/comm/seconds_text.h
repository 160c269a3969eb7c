#pragma once

// "30 s", "0.5 s": a timeout as comm/'s error messages state it (private to comm/).

#include <chrono>
#include <sstream>
#include <string>

namespace lockstep::comm::detail {

inline std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream out;
  out << static_cast<double>(ms.count()) / 1000.0 << " s";
  return out.str();
}

}  // namespace lockstep::comm::detail
