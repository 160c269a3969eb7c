// The checks that options records (TrainerOptions, FitConfig, BatchLimit) share, each throwing
// std::invalid_argument that names the option, the bad value and what is accepted. Free of LibTorch.
#pragma once

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/detail/join.h"

namespace lockstep::train::detail {

/// A value as a message shows it ("0.25", "-1").
template <typename T>
std::string text(const T& value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

/// "option must be >= least, got value".
template <typename T>
void check_at_least(const char* option, T value, T least) {
  if (value < least) {
    throw std::invalid_argument(std::string(option) + " must be >= " + text(least) + ", got " + text(value));
  }
}

/// "option 'value' is not known (expected one of: a, b, c)".
inline void check_member(const char* option, const std::string& value,
                         const std::vector<std::string>& accepted) {
  if (std::find(accepted.begin(), accepted.end(), value) != accepted.end()) return;
  throw std::invalid_argument(std::string(option) + " '" + value + "' is not known (expected one of: " +
                              lockstep::detail::join(accepted, ", ") + ")");
}

}  // namespace lockstep::train::detail
