#pragma once

// The LibTorch version a piece of code needs, in one test usable in #if (where the API differs, the other
// branch does not compile) and in constexpr expressions.

#include <torch/version.h>

/// Whether the LibTorch built against is `major`.`minor` or later.
#define LOCKSTEP_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
