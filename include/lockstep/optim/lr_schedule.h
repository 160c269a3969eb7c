#pragma once

#include <cstdint>
#include <string>

namespace lockstep::optim {

/// The shape of the learning rate over a run.
enum class LrShape {
  kConstant,  ///< base_lr throughout
  kCosine,    ///< base_lr * (1 + cos(pi * t / T)) / 2 after warmup: reaches 0 at the last step
};

/// Parses "constant" or "cosine"; throws std::invalid_argument naming the value and the accepted ones.
LrShape parse_lr_shape(const std::string& name);
const char* to_string(LrShape shape);

/// Learning rate as a function of the optimizer step (0-based), the seed 001 shape: an optional linear
/// warmup from base_lr / warmup_steps to base_lr, then constant or a cosine decay to zero at
/// total_steps. Pure arithmetic, the same on every rank: no state, so resuming at step s needs only s.
///
/// Example:
///   LrSchedule schedule(1e-3, LrShape::kCosine, /*total_steps=*/4690);
///   double lr = schedule.at(step);
class LrSchedule {
 public:
  /// Throws std::invalid_argument when base_lr <= 0, total_steps < 1 or warmup_steps < 0.
  LrSchedule(double base_lr, LrShape shape, int64_t total_steps, int64_t warmup_steps = 0);

  /// The learning rate for optimizer step `step` (steps beyond total_steps keep the last value).
  double at(int64_t step) const;

  double base_lr() const { return base_lr_; }
  LrShape shape() const { return shape_; }
  int64_t total_steps() const { return total_steps_; }
  int64_t warmup_steps() const { return warmup_steps_; }

 private:
  double base_lr_;
  LrShape shape_;
  int64_t total_steps_;
  int64_t warmup_steps_;
};

}  // namespace lockstep::optim
