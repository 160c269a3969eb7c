#pragma once

#include <string>

namespace lockstep::optim {

/// An optimizer whose step() can be captured in a CUDA graph and replayed (TrainerOptions::cuda_graphs).
///
/// A replay runs the captured kernels and no host code, so two things a step does on the host must move:
/// the learning rate, which a captured kernel would otherwise keep as the constant it was at capture, is
/// read from device memory that before_replay() refreshes outside the graph; and the step counts the
/// host keeps (the optimizer state a checkpoint saves) are advanced by after_replay(), in step with the
/// device's, which the captured kernels advance themselves.
///
/// The protocol, for each step after the first few (which run eagerly, creating the state):
///   before_replay();  capture { ... step(); }  replay;                   // the captured step, run once
///   before_replay();  replay;  after_replay();                           // every later step
class GraphCapturable {
 public:
  virtual ~GraphCapturable() = default;
  /// Why the next step() cannot be captured ("" when it can): parameters on the CPU, amsgrad, a LibTorch
  /// without the kernels' device-side learning rate.
  virtual std::string capture_refusal() const = 0;
  /// The parameter groups' current learning rates into the device memory the captured kernels read
  /// (a copy only when one changed). From the first call on, step() reads them there too.
  virtual void before_replay() = 0;
  /// After each replay but the one right after capture (whose host code ran while capturing): the host's
  /// step counts advance as the device's did.
  virtual void after_replay() = 0;
};

}  // namespace lockstep::optim
