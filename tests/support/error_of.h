#pragma once

// The message of the std::invalid_argument a call throws, for tests of error messages.

#include <stdexcept>
#include <string>

namespace lockstep::testing {

/// what() of the std::invalid_argument `f()` throws; "(no std::invalid_argument thrown)" when it throws
/// none (other exceptions pass through), so that comparing it with the expected message fails readably.
template <typename F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no std::invalid_argument thrown)";
}

}  // namespace lockstep::testing
