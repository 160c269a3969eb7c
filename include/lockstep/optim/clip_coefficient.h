// Gradient clipping's scale, as torch.nn.utils.clip_grad_norm_ computes it.
#pragma once

#include <algorithm>

namespace lockstep::optim {

/// What clip_grad_norm_ multiplies every gradient by, given the gradients' total norm: max_norm /
/// (total_norm + 1e-6), clamped at 1 (1: leave them). A NaN norm gives NaN (the gradients become NaN, so a
/// skipped step or an on-NaN check sees it); an infinite one gives 0, as in torch.
inline double clip_coefficient(double max_norm, double total_norm) {
  const double coefficient = max_norm / (total_norm + 1e-6);
  return coefficient != coefficient ? coefficient : std::min(coefficient, 1.0);
}

}  // namespace lockstep::optim
