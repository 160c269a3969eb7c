#include "lockstep/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "lockstep/detail/enum_names.h"

namespace lockstep::optim {

namespace {

constexpr lockstep::detail::EnumNames<LrShape, 3> kLrShapeNames{
    {{LrShape::kConstant, "constant"}, {LrShape::kCosine, "cosine"}, {LrShape::kStep, "step"}}};

}  // namespace

LrShape parse_lr_shape(const std::string& name) {
  return lockstep::detail::parse_enum(kLrShapeNames, name, "learning-rate schedule");
}

const char* to_string(LrShape shape) {
  return lockstep::detail::enum_to_string(kLrShapeNames, shape);
}

LrSchedule::LrSchedule(double base_lr, LrShape shape, int64_t total_steps, int64_t warmup_steps)
    : base_lr_(base_lr),
      shape_(shape),
      total_steps_(total_steps),
      warmup_steps_(warmup_steps),
      every_steps_(std::max<int64_t>(1, (total_steps - warmup_steps) / 3)) {
  if (!(base_lr > 0.0) || !std::isfinite(base_lr)) {
    throw std::invalid_argument("learning rate must be a positive number, got " + std::to_string(base_lr));
  }
  if (total_steps < 1) {
    throw std::invalid_argument("a schedule needs total_steps >= 1, got " + std::to_string(total_steps));
  }
  if (warmup_steps < 0) {
    throw std::invalid_argument("warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  }
}

LrSchedule& LrSchedule::step_decay(int64_t every_steps, double gamma) {
  if (shape_ != LrShape::kStep) {
    throw std::invalid_argument(std::string("step_decay applies to LrShape::kStep only, this schedule is ") +
                                to_string(shape_));
  }
  if (every_steps < 1) {
    throw std::invalid_argument("step_decay: every_steps must be >= 1, got " + std::to_string(every_steps));
  }
  if (!(gamma > 0.0 && gamma <= 1.0)) {
    throw std::invalid_argument("step_decay: gamma must be in (0, 1], got " + std::to_string(gamma));
  }
  every_steps_ = every_steps;
  gamma_ = gamma;
  return *this;
}

double LrSchedule::at(int64_t step) const {
  step = std::clamp<int64_t>(step, 0, total_steps_ - 1);
  if (step < warmup_steps_) {
    return base_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_);
  }
  if (shape_ == LrShape::kConstant) return base_lr_;
  if (shape_ == LrShape::kStep) {
    return base_lr_ * std::pow(gamma_, static_cast<double>((step - warmup_steps_) / every_steps_));
  }
  // Cosine over the steps after warmup; step total_steps - 1 is the last one taken, and it gets
  // the small positive rate of the last grid point before zero, as torch's CosineAnnealingLR does
  // when T_max counts the steps taken.
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps_ - warmup_steps_));
  const double t = static_cast<double>(step - warmup_steps_);
  constexpr double kPi = 3.14159265358979323846;
  return base_lr_ * 0.5 * (1.0 + std::cos(kPi * t / span));
}

}  // namespace lockstep::optim
