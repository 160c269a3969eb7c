#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace lockstep::train {

/// What a program shows its user for `error`: the message only. LibTorch's errors (c10::Error: TORCH_CHECK
/// in LibTorch, in a model, or in lockstep's lower layers) carry the C++ stack trace where they were thrown
/// ("Exception raised from ... frame #0 ..."), which says nothing to someone running a training job; it is
/// kept when LOCKSTEP_DEBUG is set (to anything but "" or "0"), for whoever debugs lockstep itself.
/// lockstep fit and lockstep export print errors through it; a program of one's own may too.
inline std::string error_message(const std::exception& error) {
  const char* debug = std::getenv("LOCKSTEP_DEBUG");
  const bool keep_trace = debug != nullptr && *debug != '\0' && std::strcmp(debug, "0") != 0;
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error); torch_error && !keep_trace)
    return torch_error->what_without_backtrace();
  return error.what();
}

}  // namespace lockstep::train
