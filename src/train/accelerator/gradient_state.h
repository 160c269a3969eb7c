// detail::GradientState: the Accelerator's accumulation counters (internal).
#pragma once

#include <cstdint>

namespace lockstep::train::detail {

/// Where the accumulation stands, shared by the accelerator, its optimizers and its loaders (Accelerate's
/// GradientState).
struct GradientState {
  int64_t num_steps = 1;       // gradient_accumulation_steps
  int64_t micro_steps = 0;     // micro-steps of the current group so far
  int64_t group_size = 1;      // micro-steps in the current group: num_steps, or fewer at the end of a pass
  bool sync_gradients = true;  // the current micro-step synchronises (true outside accumulate())
  int64_t sync_steps = 0;      // sync micro-steps since the start (Accelerator::step())
  // elastic: sync_steps at the last step every rank voted to apply (Accelerator::recover() rolls back to it).
  int64_t committed_steps = 0;
  // Batches of a prepared loader's pass from the one being trained to the end (that one included);
  // -1 outside a pass.
  int64_t batches_left = -1;
};

}  // namespace lockstep::train::detail
