// PreparedOptimizer: an optimizer that Accelerator::prepare made step only on the steps that synchronise
// gradients.
#pragma once

#include <memory>
#include <utility>

#include <torch/optim/optimizer.h>

namespace lockstep::train {

class Accelerator;

/// An optimizer whose step() and zero_grad() act only when the accelerator synchronises gradients (every
/// gradient_accumulation_steps-th micro-step of accumulate(), and the last batch of a pass), and whose
/// step() goes through the GradScaler under fp16. Must not outlive its Accelerator.
///
/// Example:
///   auto optimizer = accelerator.prepare(torch::optim::Adam(net->parameters(), 1e-3));
///   ... accelerator.backward(loss); optimizer.step(); optimizer.zero_grad();
class PreparedOptimizer {
 public:
  /// On a sync step: the optimizer's step (fp16: the GradScaler's step and update, which skips the step
  /// when a gradient is inf/NaN). Otherwise nothing.
  void step();
  /// On a sync step: the optimizer's zero_grad. Otherwise nothing (the gradients keep accumulating).
  void zero_grad();
  /// The last sync step's update was skipped (fp16 found an inf/NaN gradient).
  bool step_was_skipped() const { return step_was_skipped_; }

  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  torch::optim::Optimizer* operator->() { return optimizer_.get(); }

 private:
  friend class Accelerator;
  PreparedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, Accelerator& accelerator)
      : optimizer_(std::move(optimizer)), accelerator_(&accelerator) {}
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  Accelerator* accelerator_;
  bool step_was_skipped_ = false;
};

}  // namespace lockstep::train
