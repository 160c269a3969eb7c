// AccumulateGuard: the scope of one micro-step under gradient accumulation (Accelerator::accumulate).
#pragma once

#include <optional>

#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/ddp/gradient_sync.h"

namespace lockstep::train {

/// The scope of one micro-step under gradient accumulation (Accelerate's `with
/// accelerator.accumulate(model):`). Gradient synchronisation is off for the scope unless this micro-step is
/// a sync step.
class AccumulateGuard {
 public:
  AccumulateGuard(bool sync, ddp::GradientSync& reducer) {
    if (!sync) no_sync_.emplace(reducer);
  }
  AccumulateGuard(const AccumulateGuard&) = delete;
  AccumulateGuard& operator=(const AccumulateGuard&) = delete;
  /// Whether this micro-step synchronises gradients (and steps the optimizer).
  bool sync_gradients() const { return !no_sync_.has_value(); }

 private:
  std::optional<ddp::NoSyncGuard> no_sync_;
};

}  // namespace lockstep::train
