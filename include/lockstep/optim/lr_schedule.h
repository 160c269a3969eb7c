#pragma once

#include <cstdint>
#include <string>

namespace lockstep::optim {

/// The shape of the learning rate over a run.
enum class LrShape {
  kConstant,  ///< base_lr throughout
  kCosine,    ///< base_lr * (1 + cos(pi * t / T)) / 2 after warmup: reaches 0 at the last step
  kStep,      ///< base_lr * gamma^floor(t / every_steps) after warmup (torch's StepLR): see step_decay()
};

/// Parses "constant", "cosine" or "step"; throws std::invalid_argument naming the value and the accepted
/// ones.
LrShape parse_lr_shape(const std::string& name);
const char* to_string(LrShape shape);

/// Learning rate as a function of the optimizer step (0-based), the seed 001 shape: an optional linear
/// warmup from base_lr / warmup_steps to base_lr, then constant, a cosine decay to zero at total_steps,
/// or a step decay (times gamma every `every_steps` steps, counted from the end of the warmup, as torch's
/// SequentialLR(LinearLR, StepLR) does). Pure arithmetic, the same on every rank: no state, so resuming at
/// step s needs only s.
///
/// Example:
///   LrSchedule schedule(1e-3, LrShape::kCosine, /*total_steps=*/4690);
///   double lr = schedule.at(step);
///   LrSchedule steps(0.1, LrShape::kStep, /*total_steps=*/900);
///   steps.step_decay(/*every_steps=*/300, /*gamma=*/0.1);  // 0.1 for steps 0-299, 0.01, then 0.001
class LrSchedule {
 public:
  /// Throws std::invalid_argument when base_lr <= 0, total_steps < 1 or warmup_steps < 0.
  LrSchedule(double base_lr, LrShape shape, int64_t total_steps, int64_t warmup_steps = 0);

  /// Sets the step decay of LrShape::kStep: the rate is multiplied by `gamma` every `every_steps` optimizer
  /// steps after the warmup. Without this call kStep decays by 0.1 every max(1, (total_steps -
  /// warmup_steps) / 3) steps. Throws std::invalid_argument when the shape is not kStep, every_steps < 1, or
  /// gamma is not in (0, 1]. Returns *this.
  LrSchedule& step_decay(int64_t every_steps, double gamma = 0.1);

  /// The learning rate for optimizer step `step` (steps beyond total_steps keep the last value).
  double at(int64_t step) const;

  double base_lr() const { return base_lr_; }
  LrShape shape() const { return shape_; }
  int64_t total_steps() const { return total_steps_; }
  int64_t warmup_steps() const { return warmup_steps_; }
  int64_t decay_every_steps() const { return every_steps_; }  ///< kStep only
  double decay_gamma() const { return gamma_; }               ///< kStep only

 private:
  double base_lr_;
  LrShape shape_;
  int64_t total_steps_;
  int64_t warmup_steps_;
  int64_t every_steps_;
  double gamma_ = 0.1;
};

}  // namespace lockstep::optim
