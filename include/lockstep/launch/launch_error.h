#pragma once

#include <stdexcept>

namespace lockstep::launch {

/// A caller mistake (an option out of range, flags that contradict each other) or a launch that cannot
/// start (the log directory cannot be created). The message names the option or path and the bad value,
/// e.g. "node_rank=2 is out of range for nnodes=2 (must be in [0, 1])": the options by name (LaunchOptions;
/// `lockstep run` shows them as its flags).
///
/// Failures of the workers themselves are not exceptions: `Launcher::run` reports them in its
/// `LaunchResult`.
class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace lockstep::launch
