#pragma once

// The message of the exception a call throws, for tests of error messages.

#include <exception>
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

/// what() of the std::exception `f()` throws (of any kind), "" when it throws none.
template <typename F>
std::string what_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace lockstep::testing
