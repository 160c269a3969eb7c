// PreparedOptimizer (include/lockstep/train/accelerator/prepared_optimizer.h): its step and zero_grad are
// the Accelerator's, which knows whether the micro-step synchronises.
#include "lockstep/train/accelerator/prepared_optimizer.h"

#include "lockstep/train/accelerator.h"

namespace lockstep::train {

void PreparedOptimizer::step() {
  accelerator_->optimizer_step(*this);
}
void PreparedOptimizer::zero_grad() {
  accelerator_->optimizer_zero_grad(*this);
}

}  // namespace lockstep::train
